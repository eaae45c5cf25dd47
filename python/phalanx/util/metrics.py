"""Custom metrics, as Ray's `ray.util.metrics`: Counter, Gauge and Histogram, with tag keys and default
tags. What a task, an actor or the driver records is exported on its node's Prometheus endpoint
(`http://NODE:PORT/metrics`, the port in `phalanx.nodes()[i]["MetricsExportPort"]`) as `ray_<name>` (a
counter as `ray_<name>_total`), labelled with its tags and with Component, JobId, NodeAddress, SessionName,
Version and WorkerId (docs/observability.md, "Metrics").

    from phalanx.util.metrics import Counter
    requests = Counter("requests", description="requests served", tag_keys=("route",))
    requests.set_default_tags({"route": "/"})
    requests.inc()

Ray's checks and wording: an empty name is a ValueError; a name Prometheus cannot take warns and the
metric records nothing; tag keys are a tuple of str (TypeError); a default tag whose key was not declared
is "Unrecognized tag key" (ValueError); a declared key with no value at record time is "Missing value for
tag key(s)" (ValueError); tag values are str (TypeError). As in Ray since its OpenTelemetry exporter, a
tag passed at record time whose key was not declared is not an error: it labels the series too."""
import re
import warnings
from typing import Any, Dict, List, Optional, Tuple, Union

from phalanx._private import metrics_recorder as _rec

# Prometheus's rule for a metric name (prometheus_client's validation, as Ray uses it).
_VALID_METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")

__all__ = ["Counter", "Histogram", "Gauge"]


class _Recording:
    """What a metric records into (Ray's Cython metric: `record(value, tags=)`)."""

    def __init__(self, kind, metric):
        self._kind = kind
        self._metric = metric

    def record(self, value, tags=None):
        m = self._metric
        tags = dict(tags or {})
        declared = {key: tags.get(key, "") for key in m._tag_keys}
        declared.update(tags)  # (a tag whose key was not declared is kept too, as Ray's exporter does)
        for key, value_ in _rec.default_labels().items():
            declared.setdefault(key, value_)
        _rec.recorder().record(self._kind, m._name, m._description, declared, float(value),
                               getattr(m, "_buckets", None))


class Metric:
    """The parent class of Counter, Gauge and Histogram (Ray's `ray.util.metrics.Metric`)."""

    def __init__(self, name: str, description: str = "", tag_keys: Optional[Tuple[str, ...]] = None):
        self._discard_metric = self._is_invalid_metric_name(name)
        self._name = name
        self._description = description
        self._default_tags = {}
        self._tag_keys = tag_keys or tuple()
        self._metric = None
        if not isinstance(self._tag_keys, tuple):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(self._tag_keys)}")
        for key in self._tag_keys:
            if not isinstance(key, str):
                raise TypeError(f"Tag keys must be str, got {type(key)}.")

    def _is_invalid_metric_name(self, name: str) -> bool:
        if len(name) == 0:
            raise ValueError("Empty name is not allowed. Please provide a metric name.")
        if not _VALID_METRIC_NAME_RE.match(name):
            warnings.warn(f"Invalid metric name: {name}. Metric will be discarded and data will not be collected "
                          "or published. Metric names can only contain letters, numbers, _, and :. Metric names "
                          "cannot start with numbers.", UserWarning)
            return True
        return False

    def set_default_tags(self, default_tags: Dict[str, str]):
        """Tags used by every record call that does not set them; returns the metric itself."""
        for key, val in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key}.")
            if not isinstance(val, str):
                raise TypeError(f"Tag values must be str, got {type(val)}.")
        self._default_tags = default_tags
        return self

    def _record(self, value: Union[int, float], tags: Optional[Dict[str, str]] = None) -> None:
        if self._discard_metric:
            return
        assert self._metric is not None
        final_tags = self._get_final_tags(tags)
        self._validate_tags(final_tags)
        self._metric.record(value, tags=final_tags)

    def _get_final_tags(self, tags):
        if not tags:
            return self._default_tags
        for val in tags.values():
            if not isinstance(val, str):
                raise TypeError(f"Tag values must be str, got {type(val)}.")
        return {**self._default_tags, **tags}

    def _validate_tags(self, final_tags):
        missing = [key for key in self._tag_keys if key not in final_tags]
        if missing:
            raise ValueError(f"Missing value for tag key(s): {','.join(missing)}.")

    @property
    def info(self) -> Dict[str, Any]:
        """The metric's name, description, tag keys and default tags."""
        return {"name": self._name, "description": self._description, "tag_keys": self._tag_keys,
                "default_tags": self._default_tags}


def _check_value(value):
    if not isinstance(value, (int, float)):
        raise TypeError(f"value must be int or float, got {type(value)}.")


class Counter(Metric):
    """A total that only grows (Prometheus's counter): exported as `ray_<name>_total`."""

    def __init__(self, name: str, description: str = "", tag_keys: Optional[Tuple[str, ...]] = None):
        super().__init__(name, description, tag_keys)
        self._metric = None if self._discard_metric else _Recording(_rec.COUNTER, self)

    def __reduce__(self):
        return self.__class__, (self._name, self._description, self._tag_keys)

    def inc(self, value: Union[int, float] = 1.0, tags: Dict[str, str] = None):
        """Adds `value` (> 0; 1 by default); `tags` override the default tags."""
        _check_value(value)
        if value <= 0:
            raise ValueError(f"value must be >0, got {value}")
        self._record(value, tags=tags)


class Histogram(Metric):
    """Counts of observed values in buckets (`boundaries`: their upper bounds, positive), with their sum
    and count: exported as `ray_<name>_bucket{le=...}`, `_sum` and `_count`."""

    def __init__(self, name: str, description: str = "", boundaries: List[float] = None,
                 tag_keys: Optional[Tuple[str, ...]] = None):
        super().__init__(name, description, tag_keys)
        if boundaries is None or len(boundaries) == 0:
            raise ValueError("boundaries argument should be provided when using the Histogram class. e.g., "
                             'Histogram("name", boundaries=[1.0, 2.0])')
        for i, boundary in enumerate(boundaries):
            if boundary <= 0:
                raise ValueError(f"Invalid `boundaries` argument at index {i}, {boundaries}. Use positive values "
                                 "for the arguments.")
        self.boundaries = boundaries
        self._buckets = sorted(set(float(b) for b in boundaries))  # (the bucket upper bounds, as exported)
        if len(self._buckets) > 256:
            raise ValueError(f"a histogram has at most 256 boundaries, got {len(self._buckets)}")
        self._metric = None if self._discard_metric else _Recording(_rec.HISTOGRAM, self)

    def observe(self, value: Union[int, float], tags: Dict[str, str] = None):
        """Counts `value` in its bucket; `tags` override the default tags."""
        _check_value(value)
        self._record(value, tags)

    def __reduce__(self):
        return Histogram, (self._name, self._description, self.boundaries, self._tag_keys)

    @property
    def info(self):
        info = super().info
        info.update({"boundaries": self.boundaries})
        return info


class Gauge(Metric):
    """The last value set (Prometheus's gauge): exported as `ray_<name>`."""

    def __init__(self, name: str, description: str = "", tag_keys: Optional[Tuple[str, ...]] = None):
        super().__init__(name, description, tag_keys)
        self._metric = None if self._discard_metric else _Recording(_rec.GAUGE, self)

    def set(self, value: Optional[Union[int, float]], tags: Dict[str, str] = None):
        """Sets the gauge to `value` (None: nothing); `tags` override the default tags."""
        if value is None:
            return
        _check_value(value)
        self._record(value, tags)

    def __reduce__(self):
        return Gauge, (self._name, self._description, self._tag_keys)
