"""Async actors and asyncio with refs as Ray's `python/ray/tests/test_asyncio.py` and
`test_async_compat.py` check them (ray-project/ray); each test is named after the Ray test it follows."""
import asyncio
import threading
import time

import pytest

import ray
from suite_utils import wait_for_condition


def test_asyncio_actor(ray_start_regular_shared):
    @ray.remote
    class AsyncBatcher:
        def __init__(self):
            self.batch = []
            self.event = asyncio.Event()

        async def add(self, x):
            self.batch.append(x)
            if len(self.batch) >= 3:
                self.event.set()
            else:
                await self.event.wait()
            return sorted(self.batch)

    a = AsyncBatcher.remote()
    x1, x2, x3 = a.add.remote(1), a.add.remote(2), a.add.remote(3)
    assert ray.get([x1, x2, x3], timeout=30) == [[1, 2, 3]] * 3


def test_asyncio_actor_same_thread(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def sync_thread_id(self):
            return threading.current_thread().ident

        async def async_thread_id(self):
            return threading.current_thread().ident

    a = Actor.remote()
    sync_id, async_id = ray.get([a.sync_thread_id.remote(), a.async_thread_id.remote()])
    assert sync_id == async_id


def test_asyncio_actor_concurrency(ray_start_regular_shared):
    @ray.remote
    class RecordOrder:
        def __init__(self):
            self.history = []

        async def do_work(self):
            self.history.append("STARTED")
            await asyncio.sleep(0.01)
            self.history.append("ENDED")

        def get_history(self):
            return self.history

    num_calls = 10
    a = RecordOrder.options(max_concurrency=1).remote()
    ray.get([a.do_work.remote() for _ in range(num_calls)])
    history = ray.get(a.get_history.remote())
    # With max_concurrency=1 the calls still interleave? No: one at a time, in order.
    assert history == ["STARTED", "ENDED"] * num_calls

    b = RecordOrder.options(max_concurrency=num_calls).remote()
    ray.get([b.do_work.remote() for _ in range(num_calls)])
    history = ray.get(b.get_history.remote())
    assert history[:2] == ["STARTED", "STARTED"]  # they overlap


def test_asyncio_actor_high_concurrency(ray_start_regular_shared):
    @ray.remote
    class AsyncConcurrencyBatcher:
        def __init__(self, batch_size):
            self.batch = []
            self.event = asyncio.Event()
            self.batch_size = batch_size

        async def add(self, x):
            self.batch.append(x)
            if len(self.batch) >= self.batch_size:
                self.event.set()
            else:
                await self.event.wait()
            return sorted(self.batch)

    batch_size = 200
    a = AsyncConcurrencyBatcher.options(max_concurrency=batch_size * 2).remote(batch_size)
    result = ray.get([a.add.remote(i) for i in range(batch_size)], timeout=60)
    assert result[0] == list(range(batch_size))


def test_asyncio_get(ray_start_regular_shared):
    @ray.remote
    class RemoteActor:
        def __init__(self):
            self.actor = None

        def ping(self):
            return 1

        async def call_other(self, other):
            return await other.ping.remote()

        async def get_direct(self):
            return await ray.put("from put")

    a = RemoteActor.remote()
    b = RemoteActor.remote()
    assert ray.get(a.call_other.remote(b)) == 1
    assert ray.get(a.get_direct.remote()) == "from put"


def test_asyncio_actor_async_get(ray_start_regular_shared):
    @ray.remote
    def remote_task():
        return 1

    @ray.remote
    class AsyncGetter:
        async def get(self):
            return await remote_task.remote()

        async def plasma_get(self, plasma_object):
            return await plasma_object[0]

    plasma_object = ray.put(2)
    getter = AsyncGetter.remote()
    assert ray.get(getter.get.remote()) == 1
    assert ray.get(getter.plasma_get.remote([plasma_object])) == 2


def test_asyncio_double_await(ray_start_regular_shared):
    @ray.remote
    def slow():
        return 3

    @ray.remote
    class Actor:
        async def double(self, ref_list):
            ref = ref_list[0]
            first = await ref
            second = await ref
            return first + second

    assert ray.get(Actor.remote().double.remote([slow.remote()])) == 6


def test_asyncio_exit_actor(ray_start_regular_shared):
    @ray.remote
    class Actor:
        async def exit(self):
            ray.actor.exit_actor()

        async def ping(self):
            return "pong"

    a = Actor.remote()
    assert ray.get(a.ping.remote()) == "pong"
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.exit.remote(), timeout=30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.ping.remote(), timeout=30)


def test_async_callback(ray_start_regular_shared):
    @ray.remote
    def f():
        return 10

    done = threading.Event()
    seen = []

    def callback(result):
        seen.append(result)
        done.set()

    fut = f.remote().future()
    fut.add_done_callback(lambda fu: callback(fu.result()))
    assert done.wait(30)
    assert seen == [10]


def test_async_function_errored(ray_start_regular_shared):
    @ray.remote
    class Actor:
        async def fail(self):
            raise ValueError("async boom")

    with pytest.raises(ValueError, match="async boom"):
        ray.get(Actor.remote().fail.remote())


def test_async_remote_function_refused(ray_start_regular_shared):
    """Ray refuses `async def` remote functions when they are made remote (async actors are the way)."""
    async def f(x):
        return x

    with pytest.raises(ValueError, match="async def"):
        ray.remote(f)


def test_await_ref_in_driver(ray_start_regular_shared):
    @ray.remote
    def f():
        return "awaited"

    async def main():
        return await f.remote()

    assert asyncio.run(main()) == "awaited"


def test_asyncio_gather_refs(ray_start_regular_shared):
    @ray.remote
    def f(i):
        return i

    async def main():
        return await asyncio.gather(*[f.remote(i) for i in range(10)])

    assert asyncio.run(main()) == list(range(10))


def test_asyncio_wait_for_ref_timeout(ray_start_regular_shared):
    @ray.remote
    def slow():
        time.sleep(3)
        return 1

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(slow.remote().future()), 0.1)

    asyncio.run(main())


def test_wrap_future(ray_start_regular_shared):
    @ray.remote
    def f():
        return 5

    async def main():
        return await asyncio.wrap_future(f.remote().future())

    assert asyncio.run(main()) == 5


def test_async_actor_error_keeps_actor(ray_start_regular_shared):
    @ray.remote
    class Actor:
        async def fail(self):
            raise KeyError("k")

        async def ok(self):
            return 1

    a = Actor.remote()
    with pytest.raises(KeyError):
        ray.get(a.fail.remote())
    assert ray.get(a.ok.remote()) == 1


def test_async_actor_sync_methods_run_on_loop(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

        async def get(self):
            return self.n

    a = Actor.remote()
    ray.get([a.inc.remote() for _ in range(10)])
    assert ray.get(a.get.remote()) == 10


def test_async_actor_max_concurrency_bounds(ray_start_regular_shared):
    @ray.remote(max_concurrency=2)
    class Bounded:
        def __init__(self):
            self.running = 0
            self.peak = 0

        async def work(self):
            self.running += 1
            self.peak = max(self.peak, self.running)
            await asyncio.sleep(0.05)
            self.running -= 1

        async def peak_(self):
            return self.peak

    b = Bounded.remote()
    ray.get([b.work.remote() for _ in range(8)])
    assert ray.get(b.peak_.remote()) == 2


def test_async_actor_cancel(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def __init__(self):
            self.cancelled = False

        async def wait_forever(self):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled = True
                raise

        async def was_cancelled(self):
            return self.cancelled

    a = Actor.remote()
    # (changed: the actor is up before the call. Ray's test gives the call 0.3 s to start, the actor's start
    # included; on this 2-core machine a 4-CPU node's 4 new workers take longer to start, and a call cancelled
    # before it started never runs, on both systems)
    assert ray.get(a.was_cancelled.remote()) is False
    ref = a.wait_forever.remote()
    ready, _ = ray.wait([ref], timeout=0.3)
    assert not ready
    ray.cancel(ref)
    with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.RayTaskError)):
        ray.get(ref, timeout=30)
    wait_for_condition(lambda: ray.get(a.was_cancelled.remote()))


def test_async_generator_method(ray_start_regular_shared):
    @ray.remote
    class Actor:
        async def gen(self, n):
            for i in range(n):
                await asyncio.sleep(0)
                yield i

    a = Actor.remote()
    assert [ray.get(r) for r in a.gen.remote(4)] == [0, 1, 2, 3]


def test_async_actor_in_task(ray_start_regular_shared):
    @ray.remote
    class Actor:
        async def ping(self):
            return "pong"

    @ray.remote
    def caller(handle):
        return ray.get(handle.ping.remote())

    assert ray.get(caller.remote(Actor.remote())) == "pong"


def test_get_in_async_actor_is_allowed(ray_start_regular_shared):
    @ray.remote
    def f():
        return 4

    @ray.remote
    class Actor:
        async def blocking(self):
            return ray.get(f.remote())

    assert ray.get(Actor.remote().blocking.remote()) == 4
