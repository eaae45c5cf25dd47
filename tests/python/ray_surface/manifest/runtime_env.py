"""The manifest's names of the "runtime_env" page (runtime-env.rst)."""
from .reasons import _NO_JAVA, _NO_REGISTRY

NAMES = [
    ("ray.runtime_env.RuntimeEnv", "runtime_env", "has", "phalanx takes runtime_env as a plain dict"),
    ("ray.runtime_env.RuntimeEnv.plugin_uris", "runtime_env", "has", ""),
    ("ray.runtime_env.RuntimeEnv.known_fields", "runtime_env", "has", ""),
    ("ray.runtime_env.RuntimeEnvConfig", "runtime_env", "has", ""),
    ("ray.runtime_env.RuntimeEnvConfig(setup_timeout_seconds=)", "runtime_env", "has", ""),
    ("ray.runtime_env.RuntimeEnvConfig(eager_install=)", "runtime_env", "has", ""),
    ("ray.runtime_env.RuntimeEnvConfig(log_files=)", "runtime_env", "has", ""),
    ("runtime_env:working_dir", "runtime_env", "has", "a local directory or .zip, or an http(s)/file URI of a .zip"),
    ("runtime_env:py_modules", "runtime_env", "has", ""),
    ("runtime_env:env_vars", "runtime_env", "has", ""),
    ("runtime_env:excludes", "runtime_env", "has", ""),
    ("runtime_env:pip", "runtime_env", "refuses", "pip: " + _NO_REGISTRY),
    ("runtime_env:conda", "runtime_env", "refuses", "conda: " + _NO_REGISTRY),
    ("runtime_env:uv", "runtime_env", "refuses", "uv: " + _NO_REGISTRY),
    ("runtime_env:container", "runtime_env", "missing", "needs a container runtime on the nodes"),
    ("runtime_env:image_uri", "runtime_env", "missing", "needs a container runtime and an image at hand"),
    ("runtime_env:py_executable", "runtime_env", "missing", ""),
    ("runtime_env:java_jars", "runtime_env", "refuses", _NO_JAVA),
    ("runtime_env:worker_process_setup_hook", "runtime_env", "has", "a function or a 'module.function'; RAY_RUNTIME_ENV_HOOK too"),
    ("runtime_env:nsight", "runtime_env", "missing", ""),
    ("runtime_env:rocprof_sys", "runtime_env", "missing", ""),
    ("runtime_env:config", "runtime_env", "has", "a RuntimeEnvConfig"),
]
