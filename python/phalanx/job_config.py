"""Ray's `ray.job_config.JobConfig`: a job's settings given to `init(job_config=...)`: its namespace, its
runtime environment, the default lifetime of its actors, its metadata, the folders its workers import
from (code_search_path) and its logging (py_logging_config). JVM options are refused: phalanx runs no
Java workers."""
import json

_LIFETIMES = ("detached", "non_detached")


class JobConfig:
    def __init__(self, jvm_options=None, code_search_path=None, runtime_env=None, _client_job=False, metadata=None,
                 ray_namespace=None, default_actor_lifetime="non_detached", _py_driver_sys_path=None,
                 py_logging_config=None):
        if jvm_options:
            raise NotImplementedError("JobConfig(jvm_options=...): phalanx runs Python workers only (no JVM)")
        self.jvm_options = []
        self.code_search_path = list(code_search_path or [])
        if not all(isinstance(p, str) for p in self.code_search_path):
            raise TypeError(f"code_search_path must be a list of folders (str), got {code_search_path!r}")
        self.runtime_env = None
        self.set_runtime_env(runtime_env)
        self.metadata = dict(metadata or {})
        self.ray_namespace = None
        if ray_namespace is not None:
            self.set_ray_namespace(ray_namespace)
        self.default_actor_lifetime = None
        self.set_default_actor_lifetime(default_actor_lifetime)
        self._py_driver_sys_path = list(_py_driver_sys_path or [])
        self.py_logging_config = py_logging_config
        self._client_job = _client_job

    def set_metadata(self, key, value):
        self.metadata[key] = value

    def set_ray_namespace(self, ray_namespace):
        if not isinstance(ray_namespace, str) or not ray_namespace or "/" in ray_namespace:
            raise ValueError(f"ray_namespace must be a non-empty string without '/', got {ray_namespace!r}")
        self.ray_namespace = ray_namespace

    def set_runtime_env(self, runtime_env, validate=False):
        """The job's runtime environment (checked now with validate=True, else when the job starts)."""
        if runtime_env is not None and validate:
            from phalanx._private import runtime_env as _env
            _env.check(runtime_env, "JobConfig.set_runtime_env()")
        self.runtime_env = runtime_env

    def set_default_actor_lifetime(self, default_actor_lifetime):
        if default_actor_lifetime not in _LIFETIMES:
            raise ValueError(f"default_actor_lifetime must be one of {_LIFETIMES}, got {default_actor_lifetime!r}")
        self.default_actor_lifetime = default_actor_lifetime

    def set_py_logging_config(self, logging_config=None):
        self.py_logging_config = logging_config

    def _to_dict(self):
        return {"jvm_options": self.jvm_options, "code_search_path": self.code_search_path,
                "runtime_env": dict(self.runtime_env) if self.runtime_env else None, "metadata": self.metadata,
                "ray_namespace": self.ray_namespace, "default_actor_lifetime": self.default_actor_lifetime}

    @classmethod
    def from_json(cls, job_config_json):
        """A JobConfig from its JSON form (a dict, or a str of one), as Ray's."""
        d = json.loads(job_config_json) if isinstance(job_config_json, str) else dict(job_config_json)
        return cls(jvm_options=d.get("jvm_options"), code_search_path=d.get("code_search_path"),
                   runtime_env=d.get("runtime_env"), metadata=d.get("metadata"),
                   ray_namespace=d.get("ray_namespace"),
                   default_actor_lifetime=d.get("default_actor_lifetime") or "non_detached")

    def __repr__(self):
        return f"JobConfig({self._to_dict()})"


__all__ = ["JobConfig"]
