"""What this process's metrics (phalanx.util.metrics) recorded, on its way to the node's Prometheus
endpoint. Each series (a metric and its tag values) keeps its running value here; a thread sends the
series that changed to the raylet every report interval (METRICS_REPORT; PHALANX_metrics_report_interval_ms
or RAY_metrics_report_interval_ms, 2000 by default), and what is left is sent when the process leaves
(phalanx.shutdown(), a worker's end). The raylet keeps the latest value of each series and serves them
(scheduler/metrics_registry.h). A series the raylet cannot take now (no connection yet, the raylet away)
stays changed and goes with the next report: nothing recorded is dropped for it."""
import bisect
import os
import threading

from phalanx import _core

COUNTER, GAUGE, HISTOGRAM = 0, 1, 2
_MAX_SERIES = 10000  # per process (the node keeps 20,000 in all: scheduler/metrics_registry.h)


def _interval_s():
    for name in ("PHALANX_metrics_report_interval_ms", "RAY_metrics_report_interval_ms"):
        value = os.environ.get(name)
        if value:
            try:
                return max(0.05, int(value) / 1000.0)
            except ValueError:
                raise ValueError(f"{name}={value!r}: want milliseconds, an integer") from None
    return 2.0


class _Series:
    __slots__ = ("kind", "description", "keys", "values", "value", "boundaries", "buckets")

    def __init__(self, kind, description, keys, values, boundaries):
        self.kind, self.description, self.keys, self.values = kind, description, keys, values
        self.value = 0.0
        self.boundaries = list(boundaries or ())
        self.buckets = [0] * (len(self.boundaries) + 1) if kind == HISTOGRAM else []

    def as_report(self, name):
        return (name, self.kind, self.description, list(self.keys), list(self.values), float(self.value),
                self.boundaries, list(self.buckets))


class Recorder:
    """The process's one recorder (recorder()). Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._series = {}   # (name, kind, tag items) -> _Series
        self._changed = set()
        self._thread = None
        self._wake = threading.Event()
        self._warned_full = False

    def record(self, kind, name, description, tags, value, boundaries=None):
        keys = tuple(tags)
        key = (name, kind, tuple(tags.items()))
        with self._lock:
            s = self._series.get(key)
            if s is None:
                if len(self._series) >= _MAX_SERIES:
                    if not self._warned_full:
                        self._warned_full = True
                        import warnings
                        warnings.warn(f"this process has {_MAX_SERIES} metric series: new tag values of {name!r} "
                                      "and others are not recorded (use fewer distinct tag values)")
                    return
                s = self._series[key] = _Series(kind, description, keys, tuple(tags.values()), boundaries)
            if kind == COUNTER:
                s.value += value
            elif kind == GAUGE:
                s.value = value
            else:
                s.value += value
                s.buckets[bisect.bisect_left(s.boundaries, value)] += 1
            self._changed.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="phalanx-metrics", daemon=True)
                self._thread.start()

    def flush(self):
        """Sends what changed since the last report; what cannot be sent now stays changed."""
        with self._lock:
            if not self._changed:
                return
            keys, self._changed = self._changed, set()
            report = [self._series[k].as_report(k[0]) for k in keys]
        try:
            _core.send_metrics(report)
        except Exception:  # noqa: BLE001 - not connected (yet, or any more): the next report takes them
            with self._lock:
                self._changed |= keys

    def _run(self):
        interval = _interval_s()
        while True:
            self._wake.wait(interval)
            self.flush()


_recorder = None
_recorder_lock = threading.Lock()


def recorder():
    global _recorder
    if _recorder is None:
        with _recorder_lock:
            if _recorder is None:
                _recorder = Recorder()
    return _recorder


def flush():
    """Sends this process's unsent metrics now (a driver's shutdown, a worker's end)."""
    if _recorder is not None:
        _recorder.flush()


_VERSION = None  # phalanx.__version__, read once (phalanx may still be importing when this module is)


def default_labels():
    """The labels Ray's core worker puts on every user metric: the job's id and the version."""
    global _VERSION
    if _VERSION is None:
        import phalanx
        _VERSION = phalanx.__version__
    from phalanx._private import state
    try:
        t = state.current_task.get()
        job = t.job_id if t is not None and t.job_id else state.job_id
    except Exception:  # noqa: BLE001 - not connected: no job yet
        job = None
    return {"JobId": job.hex() if job else "", "Version": _VERSION}
