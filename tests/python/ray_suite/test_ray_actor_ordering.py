"""The order an actor runs its calls in, after Ray's python/ray/tests/test_out_of_order_actor_execution.py,
test_actor_pass_by_ref_order_optimization in test_basic.py, and the "Actor Task Execution Order" page of Ray's
documentation: a sync actor keeps each caller's order, and a call waiting for its argument holds back only
its own caller's calls; async and threaded actors run each call once its own arguments are ready."""
import sys
import threading

import pytest

import ray
from suite_utils import Signal


@ray.remote(num_cpus=0)
def passthrough(signal, value):
    ray.get(signal.wait.remote())
    return value


def test_threaded_actor_execute_out_of_order(ray_start_regular_shared):
    @ray.remote
    class A:
        def echo(self, inp):
            return inp

    signal = Signal.remote()
    inp_ref_1 = signal.wait.remote()
    inp_ref_2 = ray.put(2)
    a = A.options(max_concurrency=2).remote()
    a.echo.remote(inp_ref_1)
    out_ref_2 = a.echo.remote(inp_ref_2)
    assert ray.get(out_ref_2, timeout=5) == 2
    ray.get(signal.send.remote())


def test_async_actor_execute_out_of_order(ray_start_regular_shared):
    @ray.remote
    class A:
        async def echo(self, inp):
            return inp

    signal = Signal.remote()
    inp_ref_1 = signal.wait.remote()
    inp_ref_2 = ray.put(2)
    a = A.options(max_concurrency=2).remote()
    a.echo.remote(inp_ref_1)
    out_ref_2 = a.echo.remote(inp_ref_2)
    assert ray.get(out_ref_2, timeout=5) == 2
    ray.get(signal.send.remote())


def test_async_actor_execute_out_of_order_once_alive(ray_start_regular_shared):
    """The same with the actor alive first (its calls go straight to its worker in phalanx)."""
    @ray.remote
    class A:
        async def echo(self, inp):
            return inp

    a = A.remote()
    assert ray.get(a.echo.remote(0)) == 0
    signal = Signal.remote()
    slow = a.echo.remote(signal.wait.remote())
    assert ray.get(a.echo.remote(2), timeout=5) == 2
    ready, _ = ray.wait([slow], timeout=0.2)
    assert not ready
    ray.get(signal.send.remote())
    assert ray.get(slow, timeout=10) is None


def test_async_actor_runs_calls_as_their_arguments_become_ready(ray_start_regular_shared):
    """The documentation's AsyncCounter: add(delayed 1) then add(2) gives [3, 2]."""
    @ray.remote
    class AsyncCounter:
        def __init__(self):
            self.value = 0

        async def add(self, addition):
            self.value += addition
            return self.value

    counter = AsyncCounter.remote()
    signal = Signal.remote()
    value0 = counter.add.remote(passthrough.remote(signal, 1))
    value1 = counter.add.remote(2)
    assert ray.get(value1, timeout=10) == 2
    ray.get(signal.send.remote())
    assert ray.get([value0, value1], timeout=10) == [3, 2]


@pytest.mark.parametrize("warm", [False, True])
def test_sync_actor_keeps_its_callers_order(ray_start_regular_shared, warm):
    """The documentation's Counter: a single-threaded actor runs one caller's calls in the order it made
    them, even when the first waits for its argument. (warm: the actor is alive before the calls.)"""
    @ray.remote
    class Counter:
        def __init__(self):
            self.value = 0

        def add(self, addition):
            self.value += addition
            return self.value

    counter = Counter.remote()
    if warm:
        assert ray.get(counter.add.remote(0)) == 0
    signal = Signal.remote()
    value0 = counter.add.remote(passthrough.remote(signal, 1))
    value1 = counter.add.remote(2)
    ready, _ = ray.wait([value1], timeout=0.5)
    assert not ready  # behind value0, which waits for its argument
    ray.get(signal.send.remote())
    assert ray.get([value0, value1], timeout=10) == [1, 3]


@pytest.mark.parametrize("warm", [False, True])
def test_actor_pass_by_ref_order_optimization(ray_start_regular_shared, warm):
    """Ray's test: a call from one caller waiting for a slow argument does not hold back another caller's
    call to the same actor. (Ray's waits 30 s for the slow value; here it waits for a signal.)"""
    @ray.remote
    class Actor:
        def f(self, x):
            return x

    a = Actor.remote()
    if warm:
        assert ray.get(a.f.remote(0)) == 0
    signal = Signal.remote()

    @ray.remote
    def runner(arg):
        return ray.get(a.f.remote(arg))

    slow = runner.remote(passthrough.remote(signal, "slow"))
    assert ray.get(runner.remote("fast"), timeout=10) == "fast"
    assert ray.get(a.f.remote("driver"), timeout=10) == "driver"
    ready, _ = ray.wait([slow], timeout=0.2)
    assert not ready
    ray.get(signal.send.remote())
    assert ray.get(slow, timeout=10) == "slow"


def test_actor_calls_with_slow_arguments_from_many_callers(ray_start_regular_shared):
    """Each caller's calls in its own order, callers not waiting for each other's arguments."""
    @ray.remote
    class Log:
        def __init__(self):
            self.seen = []

        def add(self, caller, i, _dep):
            self.seen.append((caller, i))
            return i

        def get(self):
            return self.seen

    log = Log.remote()
    ray.get(log.get.remote())
    signal = Signal.remote()

    @ray.remote
    def caller(name, slow_first):
        first = passthrough.remote(signal, 0) if slow_first else 0
        refs = [log.add.remote(name, 0, first)] + [log.add.remote(name, i, i) for i in range(1, 5)]
        return ray.get(refs)

    slow = caller.remote("slow", True)
    fast = [caller.remote(f"fast{k}", False) for k in range(2)]
    assert ray.get(fast, timeout=20) == [[0, 1, 2, 3, 4]] * 2
    seen = ray.get(log.get.remote())
    assert not [s for s in seen if s[0] == "slow"]
    ray.get(signal.send.remote())
    assert ray.get(slow, timeout=10) == [0, 1, 2, 3, 4]
    seen = ray.get(log.get.remote())
    for name in ("slow", "fast0", "fast1"):
        assert [i for c, i in seen if c == name] == [0, 1, 2, 3, 4]


def test_threaded_actor_call_waiting_for_argument_leaves_threads_free(ray_start_regular_shared):
    """max_concurrency=2: two calls waiting for their arguments do not take both threads."""
    @ray.remote
    class A:
        def echo(self, x):
            return x

        def thread_count(self):
            return threading.active_count()

    a = A.options(max_concurrency=2).remote()
    assert ray.get(a.echo.remote(0)) == 0
    signal = Signal.remote()
    slow = [a.echo.remote(signal.wait.remote()) for _ in range(3)]
    assert ray.get([a.echo.remote(i) for i in range(5)], timeout=10) == list(range(5))
    ray.get(signal.send.remote())
    assert ray.get(slow, timeout=10) == [None, None, None]


@pytest.mark.parametrize("warm", [False, True])
def test_cancel_actor_call_waiting_for_its_argument(ray_start_regular_shared, warm):
    """A call cancelled while it waits for its argument ends cancelled; the caller's later calls run.
    (Fails on Ray 2.60: the later call waits for the cancelled one there.)"""
    @ray.remote
    class A:
        def echo(self, x):
            return x

    a = A.remote()
    if warm:
        assert ray.get(a.echo.remote(0)) == 0
    signal = Signal.remote()
    waiting = a.echo.remote(signal.wait.remote())
    after = a.echo.remote(2)
    ray.cancel(waiting)
    with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.RayTaskError)):
        ray.get(waiting, timeout=10)
    assert ray.get(after, timeout=10) == 2
    ray.get(signal.send.remote())


if __name__ == "__main__":
    sys.exit(pytest.main(["-sv", __file__]))
