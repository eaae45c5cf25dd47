"""Ray's "Tasks" page (docs.ray.io/en/latest/ray-core/tasks.html), as the
documentation writes it, with `import phalanx as ray`. Sleeps are shortened;
what the page says a call prints or returns is asserted."""
import time

import pytest

import phalanx as ray


def test_tasks_page(cluster):
    # By adding the `@ray.remote` decorator, a regular Python function
    # becomes a Ray remote function.
    @ray.remote
    def my_function():
        return 1

    # To invoke this remote function, use the `remote` method.
    # This will immediately return an object ref (a future) and then create
    # a task that will be executed on a worker process.
    obj_ref = my_function.remote()

    # The result can be retrieved with ``ray.get``.
    assert ray.get(obj_ref) == 1

    @ray.remote
    def slow_function():
        time.sleep(0.5)
        return 1

    # Ray tasks are executed in parallel.
    # All computation is performed in the background, driven by Ray's internal event loop.
    start = time.monotonic()
    for _ in range(4):
        # This doesn't block.
        slow_function.remote()
    assert time.monotonic() - start < 0.5

    # Passing object refs to Ray tasks
    @ray.remote
    def function_with_an_argument(value):
        return value + 1

    obj_ref1 = my_function.remote()
    assert ray.get(obj_ref1) == 1

    # You can pass an object ref as an argument to another Ray task.
    obj_ref2 = function_with_an_argument.remote(obj_ref1)
    assert ray.get(obj_ref2) == 2

    # Waiting for Partial Results
    object_refs = [slow_function.remote() for _ in range(2)]
    # Return as soon as one of the tasks finished execution.
    ready_refs, remaining_refs = ray.wait(object_refs, num_returns=1, timeout=None)
    assert len(ready_refs) == 1 and len(remaining_refs) == 1

    # Multiple returns
    # By default, a Ray task only returns a single Object Ref.
    @ray.remote
    def return_single():
        return 0, 1, 2

    object_ref = return_single.remote()
    assert ray.get(object_ref) == (0, 1, 2)

    # However, you can configure Ray tasks to return multiple Object Refs.
    @ray.remote(num_returns=3)
    def return_multiple():
        return 0, 1, 2

    object_ref0, object_ref1, object_ref2 = return_multiple.remote()
    assert ray.get([object_ref0, object_ref1, object_ref2]) == [0, 1, 2]


def test_nested_remote_functions(cluster):
    # docs.ray.io/en/latest/ray-core/tasks/nested-tasks.html
    @ray.remote
    def f():
        return 1

    @ray.remote
    def g():
        # Call f 4 times and return the resulting object refs.
        return [f.remote() for _ in range(4)]

    @ray.remote
    def h():
        # Call f 4 times, block until those 4 tasks finish,
        # retrieve the results, and return the values.
        return ray.get([f.remote() for _ in range(4)])

    refs = ray.get(g.remote())
    assert len(refs) == 4 and all(isinstance(r, ray.ObjectRef) for r in refs)
    assert ray.get(refs) == [1, 1, 1, 1]
    assert ray.get(h.remote()) == [1, 1, 1, 1]


def test_ray_get_timeout_and_exceptions(cluster):
    # docs.ray.io/en/latest/ray-core/objects.html ("Fetching Object Data")
    from ray_compat_helpers import ray_exceptions
    exceptions = ray_exceptions()

    @ray.remote
    def long_running_function():
        time.sleep(3)

    obj_ref = long_running_function.remote()
    try:
        ray.get(obj_ref, timeout=0.5)
        raise AssertionError("no timeout")
    except exceptions.GetTimeoutError:  # TimeoutError is also fine
        pass

    # docs.ray.io/en/latest/ray-core/fault-tolerance.html ("Catching application-level failures")
    @ray.remote
    def f():
        raise Exception("the real error")

    try:
        ray.get(f.remote())
        raise AssertionError("no error")
    except exceptions.RayTaskError as e:
        assert "the real error" in str(e)
        assert isinstance(e, Exception)


def test_async_def_remote_function(cluster):
    # Ray refuses an `async def` function made remote (ValueError, "'async def' should not be used for
    # remote tasks"): async code runs in async actors. phalanx does the same.
    import asyncio

    async def f(x):
        await asyncio.sleep(0.01)
        return x + 1

    with pytest.raises(ValueError, match="'async def' should not be used for remote tasks"):
        ray.remote(f)
