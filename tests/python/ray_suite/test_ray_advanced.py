"""Ray's `python/ray/tests/test_advanced.py` (ray-project/ray, its Ray 2.x version), through `import ray`
only; each test is named after Ray's test it follows and checks what it checks, unchanged.

Left out: `test_internal_free` (`ray.internal.free`: Ray's internal API, and gone from Ray 2.60, whose
`ray.internal` is empty, so it fails on Ray too);
`test_caching_functions_to_run` and `test_running_function_on_all_workers`
(`ray.worker.global_worker.run_function_on_all_workers`, Ray's private worker object); `test_profiling_api`
(Ray skips it unless RAY_PROFILING is set; it records through `ray._private.profiling`);
`test_object_transfer_dump` (Ray skips it: "TODO(ekl)"). The older version of Ray's file also held
`test_wait_iterables`, `test_multithreading` and `test_wait_makes_object_local`, since moved out of it
(and the last reads Ray's core worker internals); they are not here."""
import sys
import time

import pytest

import ray
import ray.cluster_utils


def test_multiple_waits_and_gets(shutdown_only, init_kwargs):
    # It is important to use three workers here, so that the three tasks
    # launched in this experiment can run at the same time.
    ray.init(num_cpus=3, **init_kwargs)

    @ray.remote
    def f(delay):
        time.sleep(delay)
        return 1

    @ray.remote
    def g(input_list):
        # The argument input_list should be a list containing one object ref.
        ray.wait([input_list[0]])

    @ray.remote
    def h(input_list):
        # The argument input_list should be a list containing one object ref.
        ray.get(input_list[0])

    # Make sure that multiple wait requests involving the same object ref
    # all return.
    x = f.remote(1)
    ray.get([g.remote([x]), g.remote([x])])

    # Make sure that multiple get requests involving the same object ref all
    # return.
    x = f.remote(1)
    ray.get([h.remote([x]), h.remote([x])])


def test_wait_cluster(ray_start_cluster_enabled):
    cluster = ray_start_cluster_enabled
    cluster.add_node(num_cpus=1, resources={"RemoteResource": 1})
    cluster.add_node(num_cpus=1, resources={"RemoteResource": 1})
    ray.init(address=cluster.address)

    @ray.remote(resources={"RemoteResource": 1})
    def f():
        return

    # Make sure we have enough workers on the remote nodes to execute some
    # tasks.
    tasks = [f.remote() for _ in range(10)]
    start = time.time()
    ray.get(tasks)
    end = time.time()

    # Submit some more tasks that can only be executed on the remote nodes.
    tasks = [f.remote() for _ in range(10)]
    # Sleep for a bit to let the tasks finish.
    time.sleep((end - start) * 2)
    _, unready = ray.wait(tasks, num_returns=len(tasks), timeout=0)
    # All remote tasks should have finished.
    assert len(unready) == 0


def test_identical_function_names(ray_start_regular):
    # Define a bunch of remote functions and make sure that we don't
    # accidentally call an older version.

    num_calls = 200

    @ray.remote
    def f():
        return 1

    results1 = [f.remote() for _ in range(num_calls)]

    @ray.remote
    def f():  # noqa: F811
        return 2

    results2 = [f.remote() for _ in range(num_calls)]

    @ray.remote
    def f():  # noqa: F811
        return 3

    results3 = [f.remote() for _ in range(num_calls)]

    @ray.remote
    def f():  # noqa: F811
        return 4

    results4 = [f.remote() for _ in range(num_calls)]

    @ray.remote
    def f():  # noqa: F811
        return 5

    results5 = [f.remote() for _ in range(num_calls)]

    assert ray.get(results1) == num_calls * [1]
    assert ray.get(results2) == num_calls * [2]
    assert ray.get(results3) == num_calls * [3]
    assert ray.get(results4) == num_calls * [4]
    assert ray.get(results5) == num_calls * [5]

    @ray.remote
    def g():
        return 1

    @ray.remote  # noqa: F811
    def g():  # noqa: F811
        return 2

    @ray.remote  # noqa: F811
    def g():  # noqa: F811
        return 3

    @ray.remote  # noqa: F811
    def g():  # noqa: F811
        return 4

    @ray.remote  # noqa: F811
    def g():  # noqa: F811
        return 5

    result_values = ray.get([g.remote() for _ in range(num_calls)])
    assert result_values == num_calls * [5]


def test_illegal_api_calls(ray_start_regular):

    # Verify that we cannot call put on an ObjectRef.
    x = ray.put(1)
    with pytest.raises(Exception):
        ray.put(x)
    # Verify that we cannot call get on a regular value.
    with pytest.raises(Exception):
        ray.get(3)


if __name__ == "__main__":
    sys.exit(pytest.main(["-v", __file__]))
