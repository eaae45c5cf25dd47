"""Ray's `ray.runtime_env`: `RuntimeEnv`, the runtime environment as a dict with Ray's constructor and
accessors, and `RuntimeEnvConfig`, its "config" field. Either may be given wherever a runtime_env dict is
(`init`, `@remote`, `.options`, jobs); what phalanx sets up is in docs/runtime-env.md."""
import json

from phalanx._private import runtime_env as _env

_NOT_HERE = ("pip", "conda", "uv", "container", "image_uri", "py_executable", "nsight", "mpi", "java_jars")


class RuntimeEnvConfig(dict):
    """Ray's RuntimeEnvConfig: setup_timeout_seconds (a positive int, or -1: no limit), eager_install
    (bool), log_files (list of str)."""

    known_fields = {"setup_timeout_seconds", "eager_install", "log_files"}

    def __init__(self, setup_timeout_seconds=600, eager_install=True, log_files=None):
        super().__init__()
        if not isinstance(setup_timeout_seconds, int) or isinstance(setup_timeout_seconds, bool) or \
                (setup_timeout_seconds <= 0 and setup_timeout_seconds != -1):
            raise ValueError(f"setup_timeout_seconds must be a positive int or -1, got {setup_timeout_seconds!r}")
        if not isinstance(eager_install, bool):
            raise TypeError(f"eager_install must be a bool, got {type(eager_install).__name__}")
        log_files = [] if log_files is None else log_files
        if not isinstance(log_files, list) or not all(isinstance(f, str) for f in log_files):
            raise TypeError(f"log_files must be a list of str, got {log_files!r}")
        self.update(setup_timeout_seconds=setup_timeout_seconds, eager_install=eager_install, log_files=log_files)

    @staticmethod
    def parse(config):
        """A RuntimeEnvConfig from one or a dict of its fields (ValueError naming an unknown field)."""
        if isinstance(config, RuntimeEnvConfig):
            return config
        if not isinstance(config, dict):
            raise TypeError(f"runtime_env config must be a dict or a RuntimeEnvConfig, got {type(config).__name__}")
        unknown = set(config) - RuntimeEnvConfig.known_fields
        if unknown:
            raise ValueError(f"unknown runtime_env config field(s) {sorted(unknown)}; known: "
                             f"{sorted(RuntimeEnvConfig.known_fields)}")
        return RuntimeEnvConfig(**config)

    def to_dict(self):
        return dict(self)


class RuntimeEnv(dict):
    """Ray's RuntimeEnv: RuntimeEnv(working_dir=..., py_modules=[...], env_vars={...}, excludes=[...],
    config=...). Fields phalanx does not set up (pip, conda, uv, container, ...) raise NotImplementedError
    naming what is supported, unless _validate=False."""

    known_fields = set(_env.SUPPORTED) | set(_NOT_HERE)

    def __init__(self, *, py_modules=None, working_dir=None, pip=None, conda=None, container=None, env_vars=None,
                 worker_process_setup_hook=None, nsight=None, config=None, _validate=True, mpi=None,
                 image_uri=None, uv=None, **kwargs):
        super().__init__()
        given = dict(py_modules=py_modules, working_dir=working_dir, pip=pip, conda=conda, container=container,
                     env_vars=env_vars, worker_process_setup_hook=worker_process_setup_hook, nsight=nsight,
                     config=config, mpi=mpi, image_uri=image_uri, uv=uv, **kwargs)
        self.update({k: v for k, v in given.items() if v is not None})
        if "config" in self:
            self["config"] = RuntimeEnvConfig.parse(self["config"])
        if _validate:
            _env.check(self, "RuntimeEnv")

    def working_dir(self):
        return self.get("working_dir", "")

    def py_modules(self):
        return list(self.get("py_modules", []))

    def env_vars(self):
        return dict(self.get("env_vars", {}))

    def has_working_dir(self):
        return "working_dir" in self

    def has_py_modules(self):
        return "py_modules" in self

    def plugin_uris(self):
        """The URIs of plugin packages (pip, conda, ...): none here."""
        return []

    def to_dict(self):
        return {k: (dict(v) if isinstance(v, RuntimeEnvConfig) else v) for k, v in self.items()}

    def serialize(self):
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def deserialize(cls, serialized):
        return cls(_validate=False, **json.loads(serialized))


__all__ = ["RuntimeEnv", "RuntimeEnvConfig"]
