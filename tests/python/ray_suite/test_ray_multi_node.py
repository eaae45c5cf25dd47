"""Ray's `python/ray/tests/test_multi_node.py` (ray-project/ray), through `import ray` only; each test is named
after Ray's test it follows. `call_ray_start` (Ray's fixture: `ray start --head`, then `ray stop`, which stops
every Ray process on the machine) is a one-node `ray.cluster_utils.Cluster` (its parameters that node's
resources, as Ray's `--num-cpus`/`--num-gpus`); `run_string_as_driver` is the suite's and
`run_string_as_driver_nonblocking` is written here (a second driver, a `subprocess.Popen` of its own, as Ray's).
`test_remote_function_isolation` runs 500 rounds of two tasks in each driver (Ray's: 10000);
`test_drivers_release_resources` runs its two drivers 2 times (Ray's: 5), and reads the second driver's output
line by line with bytes.decode instead of Ray's private `ray._private.utils.decode`.
`test_receive_late_worker_logs`'s script starts its own instance with `ray.init(num_cpus=2, address="local")`
(Ray's: `ray.init(num_cpus=2)`, which would join another cluster running on this machine), and runs with Ray's
documented `RAY_DEDUP_LOGS=0` (the test counts every printed line; with log deduplication on, Ray 2.60 and
phalanx both print repeated lines once, counted).

Left out, Ray's internals only: `test_cleanup_on_driver_exit` (the object table through
`ray._private.test_utils.object_memory_usage`, and idle workers found by Ray's private process title
`ray_constants.WORKER_PROCESS_TYPE_IDLE_WORKER`); `test_error_isolation` (the GCS error pubsub,
`init_error_pubsub`/`get_error_message`)."""
import os
import subprocess
import sys
import time

import pytest

import ray
from ray.cluster_utils import Cluster
from suite_utils import phalanx_differs, run_string_as_driver


@pytest.fixture
def call_ray_start(request):
    """Ray's fixture of this name (a running cluster, its address), as a one-node Cluster; its parameter is the
    node's resources (Ray's: a `ray start --head` command line)."""
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster()
    cluster.add_node(**dict({"num_cpus": 1}, **(getattr(request, "param", None) or {})))
    yield cluster.address
    ray.shutdown()
    cluster.shutdown()


def run_string_as_driver_nonblocking(driver_script):
    """Ray's test helper of this name: starts `driver_script` as a second driver and returns its Popen (stdout
    a pipe, stderr with it)."""
    proc = subprocess.Popen([sys.executable, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    proc.stdin.write(driver_script.encode("utf-8"))
    proc.stdin.close()
    return proc


def test_remote_function_isolation(call_ray_start):
    # This test will run multiple remote functions with the same names in
    # two different drivers. Connect a driver to the Ray cluster.
    address = call_ray_start

    ray.init(address=address)

    # Start another driver and make sure that it can define and call its
    # own commands with the same names.
    driver_script = """
import ray
import time
ray.init(address="{}")
@ray.remote
def f():
    return 3
@ray.remote
def g(x, y):
    return 4
for _ in range(500):
    result = ray.get([f.remote(), g.remote(0, 0)])
    assert result == [3, 4]
print("success")
""".format(address)

    out = run_string_as_driver(driver_script)

    @ray.remote
    def f():
        return 1

    @ray.remote
    def g(x):
        return 2

    for _ in range(500):
        result = ray.get([f.remote(), g.remote(0)])
        assert result == [1, 2]

    # Make sure the other driver succeeded.
    assert "success" in out


def test_driver_exiting_quickly(call_ray_start):
    # This test will create some drivers that submit some tasks and then
    # exit without waiting for the tasks to complete.
    address = call_ray_start

    ray.init(address=address)

    # Define a driver that creates an actor and exits.
    driver_script1 = """
import ray
ray.init(address="{}")
@ray.remote
class Foo:
    def __init__(self):
        pass
Foo.remote()
print("success")
""".format(address)

    # Define a driver that creates some tasks and exits.
    driver_script2 = """
import ray
ray.init(address="{}")
@ray.remote
def f():
    return 1
f.remote()
print("success")
""".format(address)

    # Create some drivers and let them exit and make sure everything is
    # still alive.
    for _ in range(3):
        out = run_string_as_driver(driver_script1)
        # Make sure the first driver ran to completion.
        assert "success" in out
        out = run_string_as_driver(driver_script2)
        # Make sure the first driver ran to completion.
        assert "success" in out


def test_drivers_named_actors(call_ray_start):
    # This test will create some drivers that submit some tasks to the same
    # named actor.
    address = call_ray_start

    ray.init(address=address, namespace="test")

    # Define a driver that creates a named actor then sleeps for a while.
    driver_script1 = """
import ray
import time
ray.init(address="{}", namespace="test")
@ray.remote
class Counter:
    def __init__(self):
        self.count = 0
    def increment(self):
        self.count += 1
        return self.count
counter = Counter.options(name="Counter").remote()
time.sleep(100)
""".format(address)

    # Define a driver that submits to the named actor and exits.
    driver_script2 = """
import ray
import time
ray.init(address="{}", namespace="test")
while True:
    try:
        counter = ray.get_actor("Counter")
        break
    except ValueError:
        time.sleep(1)
assert ray.get(counter.increment.remote()) == {}
print("success")
""".format(address, "{}")

    process_handle = run_string_as_driver_nonblocking(driver_script1)
    try:
        for i in range(3):
            driver_script = driver_script2.format(i + 1)
            out = run_string_as_driver(driver_script)
            assert "success" in out
    finally:
        process_handle.kill()
        process_handle.wait()


def test_receive_late_worker_logs():
    # Make sure that log messages from tasks appear in the stdout even if the
    # script exits quickly.
    log_message = "some helpful debugging message"

    # Define a driver that creates a task that prints something, ensures that
    # the task runs, and then exits.
    driver_script = """
import ray
import random
import time

log_message = "{}"

@ray.remote
class Actor:
    def log(self):
        print(log_message)

@ray.remote
def f():
    print(log_message)

ray.init(num_cpus=2, address="local")

a = Actor.remote()
ray.get([a.log.remote(), f.remote()])
ray.get([a.log.remote(), f.remote()])
""".format(log_message)

    for _ in range(2):
        out = run_string_as_driver(driver_script, env=dict(os.environ, RAY_DEDUP_LOGS="0"))
        assert out.count(log_message) == 4


@phalanx_differs("a driver's plain tasks outlive it: when a driver exits, its running tasks keep their workers (and "
                 "CPUs) and its queued ones still start; the next driver's task waits for a CPU forever (Ray ends "
                 "a finished job's workers and drops its pending tasks)", run=False)
@pytest.mark.parametrize("call_ray_start", [{"num_cpus": 1, "num_gpus": 1}], indirect=True)
def test_drivers_release_resources(call_ray_start):
    address = call_ray_start

    # Define a driver that creates an actor and exits.
    driver_script1 = """
import time
import ray

ray.init(address="{}")

@ray.remote
def f(duration):
    time.sleep(duration)

@ray.remote(num_gpus=1)
def g(duration):
    time.sleep(duration)

@ray.remote(num_gpus=1)
class Foo:
    def __init__(self):
        pass

# Make sure some resources are available for us to run tasks.
ray.get(f.remote(0))
ray.get(g.remote(0))

# Start a bunch of actors and tasks that use resources. These should all be
# cleaned up when this driver exits.
foos = [Foo.remote() for _ in range(100)]
[f.remote(10 ** 6) for _ in range(100)]

print("success")
""".format(address)

    driver_script2 = driver_script1 + "import sys\nsys.stdout.flush()\ntime.sleep(10 ** 6)\n"

    def wait_for_success_output(process_handle, timeout=10):
        # Wait until the process prints "success" and then return.
        start_time = time.time()
        while time.time() - start_time < timeout:
            output_line = process_handle.stdout.readline().decode("ascii").strip()
            print(output_line)
            if output_line == "success":
                return
            time.sleep(1)
        raise TimeoutError("Timed out waiting for process to print success.")

    # Make sure we can run this driver repeatedly, which means that resources
    # are getting released in between.
    for _ in range(2):
        out = run_string_as_driver(driver_script1)
        # Make sure the first driver ran to completion.
        assert "success" in out
        # Also make sure that this works when the driver exits ungracefully.
        process_handle = run_string_as_driver_nonblocking(driver_script2)
        try:
            wait_for_success_output(process_handle)
        finally:
            # Kill the process ungracefully.
            process_handle.kill()
            process_handle.wait()
