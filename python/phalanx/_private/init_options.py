"""The keyword arguments of Ray's `ray.init` beyond phalanx's own, read in one place: what each one does
here (a node setting, the job's namespace or runtime environment, logging, the dashboard) or, for the few
that have no effect here, why (docs/ray_compat.md lists them)."""
import importlib
import json
import os
import warnings

from phalanx import logging_config as _logging_config
from phalanx._private import labels as _labels
from phalanx._private import runtime_env as _runtime_env

# Accepted with no effect, and why (each also in docs/ray_compat.md).
NO_EFFECT = {
    "_plasma_directory": "the object store is shared memory (memfd), not files in a folder",
    "_redis_max_memory": "the GCS keeps what the cluster needs; redis-server's own limit is not set",
    "_enable_object_reconstruction": "lost objects are always rebuilt from lineage where they can be",
    "system_reserved_cpu": "no resource isolation (cgroups) here",
    "system_reserved_memory": "no resource isolation (cgroups) here",
}
KNOWN = {"labels", "_metrics_export_port", "local_mode", "dashboard_host", "dashboard_port", "job_config", "logging_format", "logging_config",
         "enable_resource_isolation", "_node_ip_address", "_memory", "_redis_password", "_temp_dir",
         "_tracing_startup_hook", "_node_name", "_skip_env_hook"} | set(NO_EFFECT)
# Ray's RAY_RUNTIME_ENV_HOOK: "module.function" called with the job's runtime_env (a dict or None) in
# init(); what it returns is the job's runtime_env. init(_skip_env_hook=True) skips it.
ENV_HOOK_VARS = ("PHALANX_RUNTIME_ENV_HOOK", "RAY_RUNTIME_ENV_HOOK")


class InitOptions:
    """Ray's extra init() keywords, checked (TypeError naming an unknown one, as a Python call would)."""

    def __init__(self, given):
        unknown = set(given) - KNOWN
        if unknown:
            raise TypeError(f"init() got unexpected keyword argument(s) {sorted(unknown)}")
        self.given = given
        self.labels = _labels.check_node_labels(given.get("labels"))
        if given.get("enable_resource_isolation"):
            raise NotImplementedError("init(enable_resource_isolation=True): phalanx sets up no cgroups for its "
                                      "processes")
        if given.get("local_mode"):
            warnings.warn("local_mode is deprecated in Ray and not kept in phalanx: tasks and actors run in worker "
                          "processes as usual (use a debugger on a worker: `phalanx stack`)", DeprecationWarning,
                          stacklevel=3)
        self.job_config = given.get("job_config")
        self.logging_config = given.get("logging_config")
        if self.logging_config is None and self.job_config is not None:
            self.logging_config = self.job_config.py_logging_config

    def namespace(self, namespace):
        """The job's namespace: init's own, else the JobConfig's."""
        if namespace is None and self.job_config is not None:
            return self.job_config.ray_namespace
        return namespace

    def runtime_env(self, runtime_env):
        """The job's runtime environment: the JobConfig's under init's own, with the job's code_search_path
        first on its workers' PYTHONPATH and its LoggingConfig for them."""
        env = _runtime_env.merged(self.job_config.runtime_env if self.job_config else None, runtime_env)
        hook = next((os.environ[v] for v in ENV_HOOK_VARS if os.environ.get(v)), None)
        if hook and not self.given.get("_skip_env_hook"):
            module, _, name = hook.rpartition(".")
            env = getattr(importlib.import_module(module), name)(env or None) or {}
        extra = {}
        if self.job_config is not None and self.job_config.code_search_path:
            paths = [os.path.abspath(p) for p in self.job_config.code_search_path]
            extra["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
        if self.logging_config is not None:
            extra[_logging_config.ENV] = self.logging_config._to_json()
        if extra:
            env = _runtime_env.merged(env, {"env_vars": extra})
        return env or None

    def default_actor_lifetime(self):
        return self.job_config.default_actor_lifetime if self.job_config is not None else "non_detached"

    def job_metadata(self):
        return dict(self.job_config.metadata) if self.job_config is not None else {}

    def raylet_args(self):
        """Settings of the embedded cluster's raylets."""
        args = []
        if self.given.get("_node_ip_address"):
            args += ["--node-ip", str(self.given["_node_ip_address"])]
        if self.given.get("_memory"):
            args += ["--memory", str(int(self.given["_memory"]))]
        if self.given.get("_node_name"):
            args += ["--node-name", str(self.given["_node_name"])]
        if self.labels:
            args += ["--labels", _labels.raylet_flag(self.labels)]
        return args

    def metrics_export_port(self):
        """The first raylet's Prometheus port (None: a free one), checked."""
        port = self.given.get("_metrics_export_port")
        if port is None:
            return None
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"_metrics_export_port must be a port number (0-65535), got {port!r}")
        return port

    def session_root(self):
        return self.given.get("_temp_dir")

    def token(self):
        return self.given.get("_redis_password")

    def dashboard(self, include_dashboard):
        """(host, port) of the dashboard to start with an embedded cluster, or None."""
        if not include_dashboard:
            return None
        return self.given.get("dashboard_host") or "127.0.0.1", int(self.given.get("dashboard_port") or 8265)

    def configure_driver(self, logging_format):
        """What applies to this process now: its logging and the tracing hook."""
        if self.logging_config is not None:
            self.logging_config._apply()
        fmt = self.given.get("logging_format") or logging_format
        if fmt:
            import logging
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(fmt))
            logging.getLogger("phalanx").addHandler(handler)
        hook = self.given.get("_tracing_startup_hook")
        if hook:
            module, _, fn = hook.partition(":")
            getattr(importlib.import_module(module), fn)()

    def describe(self):
        return json.dumps({k: v for k, v in self.given.items() if k not in ("job_config", "logging_config")},
                          default=str)
