"""Ray's `python/ray/tests/test_runtime_env_setup_func.py` (ray-project/ray), through `import ray` only: a
runtime_env's `worker_process_setup_hook` (a function, or a "module.function" string) runs in every worker
before its tasks and actors; a hook that cannot be pickled fails `ray.init`; a hook that fails, or cannot be
unpickled or imported, fails the actor whose worker ran it, saying "Failed to execute the setup hook method."
Each test is named after Ray's test it follows and checks what it checks.

Changed: the hook module is this file ("ray_suite.test_ray_runtime_env_setup_func._hook", importable on the
workers as the suite's folder is on their path) in place of Ray's "ray.tests.test_runtime_env_setup_func";
the tests that call `ray.init()` give it the suite's `init_kwargs` and an address of "local" on phalanx (a new
cluster, as Ray's `ray.init()` starts here). `test_job_submission_not_allowed_for_callable` is
`test_job_submission_takes_a_module_hook_and_refuses_a_callable`: the same checks against a head started by
`phalanx start`/`ray start` through the job client of the head's address (Ray's test reads its dashboard's
address from private state; it runs on phalanx only: Ray here has no dashboard packages)."""
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import ray
from ray.job_submission import JobStatus, JobSubmissionClient

HOOK = "ray_suite.test_ray_runtime_env_setup_func._hook"
TARGET = os.environ.get("RAY_SUITE_TARGET", "phalanx")


def _hook():
    logger = logging.getLogger("")
    logger.setLevel(logging.DEBUG)


def _init(init_kwargs, **kwargs):
    if TARGET != "ray":
        kwargs.setdefault("address", "local")
    return ray.init(**kwargs, **init_kwargs)


def _actor_ready_error():
    """What a new actor's first call raises (RayActorError) when its worker's setup hook failed."""
    @ray.remote
    class A:
        pass

    a = A.remote()
    with pytest.raises(ray.exceptions.RayActorError) as e:
        ray.get(a.__ray_ready__.remote())
    return str(e.value)


@pytest.mark.parametrize("is_module", [False, True])
def test_setup_func_basic(shutdown_only, init_kwargs, is_module):
    def configure_logging(level: int):
        logger = logging.getLogger("")
        logger.setLevel(level)

    if is_module:
        runtime_env = {"worker_process_setup_hook": HOOK, "env_vars": {"ABC": "123"}}
    else:
        runtime_env = {"worker_process_setup_hook": lambda: configure_logging(logging.DEBUG),
                       "env_vars": {"ABC": "123"}}

    _init(init_kwargs, num_cpus=1, runtime_env=runtime_env)

    @ray.remote
    def f(level):
        logger = logging.getLogger("")
        assert logging.getLevelName(logger.getEffectiveLevel()) == level
        return True

    @ray.remote
    class Actor:
        def __init__(self, level):
            logger = logging.getLogger("")
            assert logging.getLevelName(logger.getEffectiveLevel()) == level

        def ready(self):
            return True

        def get_env_var(self, key):
            return os.getenv(key)

    # Test basic.
    for _ in range(10):
        assert ray.get(f.remote("DEBUG"))
    a = Actor.remote("DEBUG")
    assert ray.get(a.__ray_ready__.remote())

    # Make sure env var is not overwritten.
    assert ray.get(a.get_env_var.remote("ABC")) == "123"


def test_setup_func_failure(shutdown_only, init_kwargs):
    """
    Verify when deserilization failed, it raises an exception.
    """

    class CustomClass:
        """
        Custom class that can serialize but canont deserialize.
        It is used to test deserialization failure.
        """

        def __getstate__(self):
            # This method is called during serialization
            return self.__dict__

        def __setstate__(self, state):
            # This method is called during deserialization
            raise RuntimeError("Deserialization not allowed")

    c = CustomClass()

    def setup():
        print(c)

    _init(init_kwargs, num_cpus=1, runtime_env={"worker_process_setup_hook": setup})

    assert "Deserialization not allowed" in _actor_ready_error()

    """
    Verify when the serialization fails, ray.init fails.
    """
    ray.shutdown()
    lock = threading.Lock()

    with pytest.raises(ray.exceptions.RuntimeEnvSetupError) as e:
        _init(init_kwargs, num_cpus=0, runtime_env={"worker_process_setup_hook": lambda: print(lock)})
    assert "Failed to export the setup function." in str(e.value)

    """
    Verify when the setup hook failed, it raises an exception.
    """
    ray.shutdown()

    def setup_func():
        raise ValueError("Setup Failed")

    _init(init_kwargs, num_cpus=1, runtime_env={"worker_process_setup_hook": setup_func})

    error = _actor_ready_error()
    assert "Setup Failed" in error
    assert "Failed to execute the setup hook method." in error


def test_setup_hook_module_failure(shutdown_only, init_kwargs):
    # Use a module that cannot be found.
    _init(init_kwargs, runtime_env={"worker_process_setup_hook": HOOK + "s"})

    assert "Failed to execute the setup hook method" in _actor_ready_error()


@pytest.fixture
def head(tmp_path):
    """A head started as a user starts one (`phalanx start --head` / `ray start --head`), its job client's
    address, and the environment its commands run in; stopped at the end."""
    if ray.is_initialized():
        ray.shutdown()
    env = dict(os.environ)
    if TARGET == "ray":
        env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # (short: Ray's socket paths go in it)
        cli = [os.path.join(os.path.dirname(sys.executable), "ray")]
        port = 8265
        start = cli + ["start", "--head", "--num-cpus=1", "--include-dashboard=true", f"--dashboard-port={port}"]
        address = f"http://127.0.0.1:{port}"
    else:
        env["PHALANX_TMPDIR"] = str(tmp_path)
        env.pop("PHALANX_CLUSTER_TOKEN", None)
        cli = [sys.executable, "-m", "phalanx.scripts"]
        start = cli + ["start", "--head", "--num-cpus", "1"]
        address = None
    out = subprocess.run(start, capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    if address is None:
        address = out.stdout.split("GCS at ")[1].split()[0]
    before = {k: os.environ.get(k) for k in ("PHALANX_TMPDIR", "PHALANX_CLUSTER_TOKEN", "PHALANX_TLS")}
    os.environ.update({k: env[k] for k in ("PHALANX_TMPDIR",) if k in env})
    os.environ.pop("PHALANX_CLUSTER_TOKEN", None)
    try:
        yield address, env
    finally:
        subprocess.run(cli + ["stop"], capture_output=True, env=env, timeout=120)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.skipif(TARGET == "ray", reason="Ray here is installed without its dashboard's packages (ray[default]), "
                    "whose server takes jobs: `ray start --include-dashboard=true` fails")
def test_job_submission_takes_a_module_hook_and_refuses_a_callable(head, tmp_path):
    """Test that validates job submission with worker process setup hooks."""
    address, _ = head
    file_path = tmp_path / "test_temp.py"
    file_path.write_text("""
import ray
import sys

@ray.remote
def f():
    import logging
    logger = logging.getLogger("")
    logger.debug("this is debug")
    assert logger.getEffectiveLevel() == logging.DEBUG

ray.get(f.remote())
""")
    client = JobSubmissionClient(address)

    with pytest.raises(ValueError, match="Invalid type <class 'function'> for `worker_process_setup_hook`."):
        client.submit_job(entrypoint=f"python {file_path}",
                          runtime_env={"worker_process_setup_hook": lambda: print("abc")})

    # The hook's package (tests/python) on the job's path, and on phalanx the suite's `import ray` too.
    paths = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    if TARGET != "ray":
        paths.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "as_ray"))
    job = client.submit_job(entrypoint=f"python {file_path}",
                            runtime_env={"worker_process_setup_hook": HOOK,
                                         "env_vars": {"PYTHONPATH": os.pathsep.join(paths)}})

    deadline = time.monotonic() + 120
    while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        assert time.monotonic() < deadline, client.get_job_logs(job)
        time.sleep(0.2)
    assert client.get_job_status(job) == JobStatus.SUCCEEDED, client.get_job_logs(job)


if __name__ == "__main__":
    sys.exit(pytest.main(["-sv", __file__]))
