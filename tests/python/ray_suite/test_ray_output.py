"""What a driver prints, as Ray's `python/ray/tests/test_output.py` checks it (ray-project/ray): its own log
lines at ray.init (local instance, existing cluster), the prints of its tasks and actors reaching it
(log_to_driver: `(foo pid=...)`, `(ActorX pid=...)` with the actor's repr), the autoscaler's word on an
infeasible demand, import failures of functions and actors, spill logs, and the runtime env hook. Most tests run
a driver script of their own in a second Python process and look at what it printed. Each test is named after
the Ray test it follows and checks what it checks.

Changed, for `import ray` only: Ray's `run_string_as_driver_nonblocking` is written here (the `env` given is
added to this process's environment, so the script's `import ray` resolves as this one's), and the tests read
its stdout and stderr with `communicate` (`_run_nonblocking`: two sequential `.read()`s can block on a full
pipe); `run_string_as_driver` is the suite's. `test_autoscaler_infeasible`'s script keeps Ray's 15 s sleep as
the most it may run, but the test stops it (SIGTERM) as soon as what it looks for was printed (`_run_until`).
`test_runtime_env_hook` and `test_env_hook_skipped_for_ray_client` name this module's `_hook`
(`ray_suite.test_ray_output._hook`) instead of `ray.tests.test_output._hook`. `call_ray_start` (Ray's fixture:
`ray start --head`, then `ray stop`, which stops every Ray process on the machine) is a one-node
`ray.cluster_utils.Cluster`, which records its address where a driver's `ray.init()` looks as `ray start --head`
does; `start_cluster` is Ray's fixture of that name without its Ray Client variant. Ray's RAY_MINIMAL branch
("View the dashboard" not printed) is taken unless RAY_MINIMAL=0: this machine's Ray has no dashboard (no
`ray[default]`), nor has phalanx. `test_fail_importing_actor` / `test_fail_importing_task` do without Ray's
`error_pubsub` fixture (a GCS subscriber of Ray's; the tests never read it). `test_empty_line_thread_safety_bug`
runs once with 4 actors on a 4-CPU node (Ray's: 3 runs of 24 actors on a 24-CPU node, each actor's thread
spinning 300 million loop iterations; here 3 million), and its script is given the cluster's address instead of
"auto" (another cluster may run on this machine); `test_autoscaler_no_spam` runs 8 tasks of 1 s instead of 15.

Left out: `test_core_worker_error_message` (`ray._private.utils.push_error_to_driver`, Ray's internals);
`test_disable_driver_logs_breakpoint` (`ray.util.rpdb._driver_set_trace`, a private function of Ray's
debugger); `test_node_name_in_raylet_death` (`ray._private.worker._global_node.kill_raylet()` and Ray's
health-check knobs); `test_output_on_driver_shutdown` (RLlib/Tune PPO on a 16-CPU node: `ray.tune`, gym,
minutes of training); `test_autoscaler_warn_deadlock` and `test_autoscaler_prefix` (they fail on Ray on this
machine: its driver prints no autoscaler line about the pending actor within the script's 25 s); the Ray Client
variant of `test_env_hook_skipped_for_ray_client` (Ray Client needs grpcio, not installed here: it fails on Ray
on this machine)."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import ray
from ray.cluster_utils import Cluster
from suite_utils import phalanx_differs, run_string_as_driver

# Ray's RAY_MINIMAL=1: a Ray without its dashboard (ray[default]). This machine's Ray is one, and phalanx has no
# dashboard: the tests take that branch unless RAY_MINIMAL says otherwise.
RAY_MINIMAL = os.environ.get("RAY_MINIMAL", "1")


def run_string_as_driver_nonblocking(driver_script, env=None, write_script=True):
    """Ray's test helper of this name: `driver_script` run as a driver of its own, stdout and stderr apart."""
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.Popen([sys.executable, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=full_env)
    if write_script:
        proc.stdin.write(driver_script.encode("ascii"))
        proc.stdin.close()
    return proc


def _run_nonblocking(driver_script, env=None, timeout=120):
    """(stdout, stderr) of `driver_script` run to its end (Ray's `proc.stdout.read()`, `proc.stderr.read()`)."""
    proc = run_string_as_driver_nonblocking(driver_script, env, write_script=False)
    try:
        out, err = proc.communicate(driver_script.encode("ascii"), timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return out.decode("ascii", "replace"), err.decode("ascii", "replace")


def _run_until(driver_script, patterns, timeout=60):
    """(stdout, stderr) of `driver_script` up to when each of `patterns` was in its stdout (then it is stopped
    with SIGTERM), or its end, or `timeout` s."""
    proc = run_string_as_driver_nonblocking(driver_script)
    out, err = [], []

    def pump(stream, into):
        for line in iter(stream.readline, b""):
            into.append(line.decode("ascii", "replace"))

    threads = [threading.Thread(target=pump, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err), daemon=True)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if all(p in "".join(out) for p in patterns):
            break
        time.sleep(0.2)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for t in threads:
        t.join(timeout=10)
    return "".join(out), "".join(err)


@pytest.fixture
def call_ray_start():
    """Ray's fixture of this name (a cluster running on this machine, which a driver's `ray.init()` finds), as a
    one-node Cluster (Ray's Cluster, as `ray start --head`, records its address where `ray.init()` looks)."""
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster()
    cluster.add_node(num_cpus=1)
    yield cluster.address
    cluster.shutdown()


@pytest.fixture(params=["no_ray_client"])
def start_cluster(ray_start_cluster):
    """Ray's fixture of this name, without its Ray Client variant: (a cluster of one 4-CPU node, its address)."""
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=4)
    yield cluster, cluster.address


@phalanx_differs("ray.init() logs nothing when it starts a local instance (Ray logs 'INFO worker.py:NNNN -- "
                 "Started a local Ray instance.' to stderr through its logger)")
def test_logger_config():
    script = """
import ray

ray.init(num_cpus=1)
    """

    out_str, err_str = _run_nonblocking(script)

    print(out_str, err_str)
    assert "INFO worker.py:" in err_str, err_str


@pytest.mark.skipif(sys.platform == "win32", reason="Failing on Windows.")
@phalanx_differs("no 'Spilled N MiB, ...' line reaches the driver when objects are spilled (Ray's raylet "
                 "reports each spill to the driver while RAY_verbose_spill_logs is on, its default)")
def test_spill_logs():
    script = """
import ray
import numpy as np

ray.init(object_store_memory=200e6)

x = []

for _ in range(10):
    x.append(ray.put(np.ones(100 * 1024 * 1024, dtype=np.uint8)))
"""

    out_str = "".join(_run_nonblocking(script, env={"RAY_verbose_spill_logs": "1"}))
    print(out_str)
    assert "Spilled " in out_str

    out_str = "".join(_run_nonblocking(script, env={"RAY_verbose_spill_logs": "0"}))
    print(out_str)
    assert "Spilled " not in out_str


def _hook(env):
    return {"env_vars": {"HOOK_KEY": "HOOK_VALUE"}}


HOOK = "ray_suite.test_ray_output._hook"

@pytest.mark.skipif(sys.platform == "win32", reason="Failing on Windows.")
@pytest.mark.parametrize("skip_hook", [True, False])
def test_runtime_env_hook(skip_hook):
    ray_init_snippet = "ray.init(_skip_env_hook=True)" if skip_hook else ""

    script = f"""
import ray
import os

{ray_init_snippet}

@ray.remote
def f():
    return os.environ.get("HOOK_KEY")

print(ray.get(f.remote()))
"""

    out_str = "".join(_run_nonblocking(script, env={"RAY_RUNTIME_ENV_HOOK": HOOK}))
    print(out_str)
    if skip_hook:
        assert "HOOK_VALUE" not in out_str
    else:
        assert "HOOK_VALUE" in out_str


def test_env_hook_skipped_for_ray_client(start_cluster, monkeypatch):
    monkeypatch.setenv("RAY_RUNTIME_ENV_HOOK", HOOK)
    cluster, address = start_cluster
    ray.init(address)

    @ray.remote
    def f():
        return os.environ.get("HOOK_KEY")

    using_ray_client = address.startswith("ray://")
    if using_ray_client:
        assert ray.get(f.remote()) is None
    else:
        assert ray.get(f.remote()) == "HOOK_VALUE"


@phalanx_differs("a task no node can run (num_gpus=1 on a node without GPUs) prints nothing on the driver "
                 "within 15 s; Ray's autoscaler prints '(autoscaler +Ns) Tip: ...' and 'Error: No available node "
                 "types can fulfill resource request ...' to its stdout")
def test_autoscaler_infeasible():
    script = """
import ray
import time

ray.init(num_cpus=1)

@ray.remote(num_gpus=1)
def foo():
    pass

x = foo.remote()
time.sleep(15)
    """

    out_str, err_str = _run_until(script, ["Tip:", "Error: No available node types can fulfill"])

    print(out_str, err_str)
    assert "Tip:" in out_str
    assert "Error: No available node types can fulfill" in out_str


def test_autoscaler_no_spam():
    script = """
import ray
import time

# Check that there are no false positives with custom resources.
ray.init(num_cpus=1, resources={"node:x": 1})

@ray.remote(num_cpus=1, resources={"node:x": 1})
def f():
    time.sleep(1)
    print("task done")

ray.get([f.remote() for _ in range(8)])
    """

    out_str, err_str = _run_nonblocking(script)

    print(out_str, err_str)
    assert "Tip:" not in out_str
    assert "Tip:" not in err_str


_FAIL_IMPORTING_PRELUDE = """
import os
import sys
import tempfile
import ray

ray.init(address='{address}')
temporary_python_file = '''
def temporary_helper_function():
   return 1
'''

f = tempfile.NamedTemporaryFile("w+", suffix=".py", prefix="_", delete=True)
f_name = f.name
f.close()
f = open(f_name, "w+")
f.write(temporary_python_file)
f.flush()
directory = os.path.dirname(f_name)
# Get the module name and strip ".py" from the end.
module_name = os.path.basename(f_name)[:-3]
sys.path.append(directory)
module = __import__(module_name)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="Failing on Windows.")
def test_fail_importing_actor(ray_start_regular):
    script = _FAIL_IMPORTING_PRELUDE.format(address=ray_start_regular.address_info["address"]) + """
# Define an actor that closes over this temporary module. This should
# fail when it is unpickled.
@ray.remote(max_restarts=0)
class Foo:
    def __init__(self):
        self.x = module.temporary_python_file()
    def ready(self):
        pass
a = Foo.remote()
try:
    ray.get(a.ready.remote())
except Exception as e:
    pass
from time import sleep
sleep(3)
"""
    out_str, err_str = _run_nonblocking(script)
    print(out_str)
    print("-----")
    print(err_str)
    assert "ModuleNotFoundError: No module named" in err_str
    assert "RuntimeError: The actor with name Foo failed to import" in err_str


def test_fail_importing_task(ray_start_regular):
    script = _FAIL_IMPORTING_PRELUDE.format(address=ray_start_regular.address_info["address"]) + """
# Define an actor that closes over this temporary module. This should
# fail when it is unpickled.
@ray.remote
def foo():
    return module.temporary_python_file()

ray.get(foo.remote())
"""
    out_str, err_str = _run_nonblocking(script)
    print(out_str)
    print(err_str)
    assert "ModuleNotFoundError: No module named" in err_str
    assert "RuntimeError: The remote function failed to import" in err_str


def test_worker_stdout():
    script = """
import ray
import sys

ray.init(num_cpus=2)

@ray.remote
def foo(out_str, err_str):
    print(out_str)
    print(err_str, file=sys.stderr)

ray.get(foo.remote("abc", "def"))
    """

    out_str, err_str = _run_nonblocking(script)

    out_str = "".join(out_str.splitlines())
    assert out_str.endswith("abc"), out_str
    assert "(foo pid=" in out_str, out_str
    err_str_sec_last = "".join(err_str.split("\n")[-2].splitlines())
    assert err_str_sec_last.endswith("def")


@pytest.mark.parametrize("file", ["stdout", "stderr"])
def test_multi_stdout_err(file):
    if file == "stdout":
        file_handle = "sys.stdout"
    else:  # sys.stderr
        file_handle = "sys.stderr"

    script = f"""
import ray
import sys

ray.init(num_cpus=1)

@ray.remote
def foo():
    print(file={file_handle})

@ray.remote
def bar():
    print(file={file_handle})

@ray.remote
def baz():
    print(file={file_handle})

ray.get(foo.remote())
ray.get(bar.remote())
ray.get(baz.remote())
    """

    out_str, err_str = _run_nonblocking(script)
    if file == "stderr":
        out_str = err_str

    out_str = "".join(out_str.splitlines())
    assert "(foo pid=" in out_str, out_str
    assert "(bar pid=" in out_str, out_str
    assert "(baz pid=" in out_str, out_str


@pytest.mark.parametrize("file", ["stdout", "stderr"])
def test_actor_stdout(file):
    if file == "stdout":
        file_handle = "sys.stdout"
    else:  # sys.stderr
        file_handle = "sys.stderr"

    script = f"""
import ray
import sys

ray.init(num_cpus=2)

@ray.remote
class Actor1:
    def f(self):
        print("hi", file={file_handle})

@ray.remote
class Actor2:
    def __init__(self):
        print("init", file={file_handle})
        self.name = "ActorX"
    def f(self):
        print("bye", file={file_handle})
    def __repr__(self):
        return self.name

a = Actor1.remote()
ray.get(a.f.remote())
b = Actor2.remote()
ray.get(b.f.remote())
    """

    out_str, err_str = _run_nonblocking(script)
    if file == "stderr":
        out_str = err_str

    out_str = "".join(out_str.splitlines())
    assert "hi" in out_str, out_str
    assert "(Actor1 pid=" in out_str, out_str
    assert "bye" in out_str, out_str
    assert re.search("Actor2 pid=.*init", out_str), out_str
    assert not re.search("ActorX pid=.*init", out_str), out_str
    assert re.search("ActorX pid=.*bye", out_str), out_str
    assert re.search("Actor2 pid=.*bye", out_str), out_str


@phalanx_differs("ray.init() prints nothing when it starts a local instance (Ray: one line, "
                 "'... -- Started a local Ray instance.')")
def test_output_local_ray():
    script = """
import ray
ray.init()
    """
    output = run_string_as_driver(script)
    lines = output.strip("\n").split("\n")
    for line in lines:
        print(line)
    lines = [line for line in lines if "The object store is using /tmp" not in line]
    assert len(lines) == 1
    line = lines[0]
    print(line)
    assert "Started a local Ray instance." in line
    if RAY_MINIMAL == "1":
        assert "View the dashboard" not in line
    else:
        assert "View the dashboard" in line


@phalanx_differs("ray.init() with no address starts a new local instance instead of connecting to the "
                 "cluster already running on this machine, and prints nothing (Ray connects to the cluster that "
                 "`ray start --head` / Cluster recorded and prints 'Connecting to existing Ray cluster at address: "
                 "...' and 'Connected to Ray cluster.')")
def test_output_ray_cluster(call_ray_start):
    script = """
import ray
ray.init()
    """
    output = run_string_as_driver(script)
    lines = output.strip("\n").split("\n")
    for line in lines:
        print(line)
    assert len(lines) == 2
    assert "Connecting to existing Ray cluster at address:" in lines[0]
    assert "Connected to Ray cluster." in lines[1]
    if RAY_MINIMAL == "1":
        assert "View the dashboard" not in lines[1]
    else:
        assert "View the dashboard" in lines[1]


@pytest.mark.skipif(sys.platform == "win32", reason="Failing on Windows.")
@pytest.mark.parametrize("execution_number", range(1))
def test_empty_line_thread_safety_bug(execution_number, ray_start_cluster):
    """Make sure when new threads are used within __init__,
    the empty line is not printed.
    Related: https://github.com/ray-project/ray/pull/20987
    """
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=4)

    actor_repr = "TESTER"

    script = f"""
import time
import os
import threading
import torch

from filelock import FileLock

import ray

class Repro:
    pass

def do_lock():
    path = f"/tmp/lock"
    lock = FileLock(path, timeout=4)
    lock.acquire()

@ray.remote
class Train:
    def __init__(self, config: Repro):
        # print("b")
        def warmup():

            do_lock()
            torch.empty(0, device="cpu")
            for _ in range(3000000):
                pass

        threading.Thread(target=warmup, daemon=True).start()

    def ready(self):
        pass

    def __repr__(self):
        return "{actor_repr}"

ray.init("{cluster.address}")
actors = [Train.remote(config=None) for i in range(4)]
for a in actors:
    ray.get(a.ready.remote())
time.sleep(5)
    """
    out = run_string_as_driver(script)
    assert actor_repr not in out
