"""Ray's `ray.LoggingConfig` (`init(logging_config=...)`): the Python logging of the driver and of the
job's workers: a TEXT or JSON format with the job, worker, node, actor and task ids on each record, at
`log_level`. The workers get it through the job's runtime environment (PX_LOGGING_CONFIG)."""
import json
import logging
import os
import sys

ENV = "PX_LOGGING_CONFIG"  # (not PHALANX_*: those names are the raylet's own)
_STANDARD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


class LoggingConfig:
    def __init__(self, encoding="TEXT", log_level="INFO", additional_log_standard_attrs=None):
        if encoding not in ("TEXT", "JSON"):
            raise ValueError(f"Invalid encoding type: {encoding}. Valid encoding types are: ['JSON', 'TEXT']")
        attrs = list(additional_log_standard_attrs or [])
        bad = [a for a in attrs if a not in _STANDARD_ATTRS]
        if bad:
            raise ValueError(f"Unknown additional_log_standard_attrs: {bad}; they must be LogRecord attributes")
        self.encoding = encoding
        self.log_level = log_level
        self.additional_log_standard_attrs = attrs

    def _to_json(self):
        return json.dumps({"encoding": self.encoding, "log_level": self.log_level,
                           "additional_log_standard_attrs": self.additional_log_standard_attrs})

    def _apply(self):
        """Configures this process's root logger (once: a second call replaces the first's handler)."""
        root = logging.getLogger()
        root.handlers = [h for h in root.handlers if not getattr(h, "_phalanx_logging_config", False)]
        handler = logging.StreamHandler(sys.stderr)
        handler._phalanx_logging_config = True
        handler.setFormatter(_Formatter(self))
        root.addHandler(handler)
        root.setLevel(self.log_level)

    def __repr__(self):
        return (f"LoggingConfig(encoding={self.encoding!r}, log_level={self.log_level!r}, "
                f"additional_log_standard_attrs={self.additional_log_standard_attrs!r})")


class _Formatter(logging.Formatter):
    def __init__(self, config):
        super().__init__()
        self._config = config

    def _context(self):
        from phalanx.runtime_context import get_runtime_context
        ctx = get_runtime_context()
        out = {}
        try:
            out = {"job_id": ctx.get_job_id(), "worker_id": ctx.get_worker_id(), "node_id": ctx.get_node_id()}
            if ctx.get_actor_id():
                out["actor_id"] = ctx.get_actor_id()
            if ctx.get_task_id():
                out["task_id"] = ctx.get_task_id()
        except Exception:  # noqa: BLE001 - not connected (yet): the record alone
            pass
        return out

    def format(self, record):
        fields = {"asctime": self.formatTime(record), "levelname": record.levelname, "message": record.getMessage(),
                  "filename": record.filename, "lineno": record.lineno}
        fields.update({a: getattr(record, a, None) for a in self._config.additional_log_standard_attrs})
        fields.update(self._context())
        if record.exc_info:
            fields["exc_text"] = self.formatException(record.exc_info)
        if self._config.encoding == "JSON":
            return json.dumps(fields, default=str)
        head = f"{fields.pop('asctime')}\t{fields.pop('levelname')} {fields.pop('filename')}:{fields.pop('lineno')} -- "
        message = fields.pop("message")
        return head + message + " " + " ".join(f"{k}={v}" for k, v in fields.items())


def apply_from_environment():
    """In a worker: the job's LoggingConfig, if it set one."""
    raw = os.environ.get(ENV)
    if raw:
        d = json.loads(raw)
        LoggingConfig(d["encoding"], d["log_level"], d["additional_log_standard_attrs"])._apply()


__all__ = ["LoggingConfig"]
