"""Ray's "Actors" pages, as the documentation writes them, with
`import phalanx as ray`: docs.ray.io/en/latest/ray-core/actors.html,
.../actors/named-actors.html, .../actors/async_api.html,
.../actors/concurrency_group_api.html. Sleeps are shortened; what the pages
say is printed or returned is asserted."""
import asyncio
import concurrent.futures
import threading
import time

import pytest

import phalanx as ray


@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def increment(self):
        self.value += 1
        return self.value

    def get_counter(self):
        return self.value


def test_actors_page(cluster):
    # Create an actor from this class.
    counter = Counter.remote()
    # Call the actor.
    obj_ref = counter.increment.remote()
    assert ray.get(obj_ref) == 1

    # Create ten Counter actors.
    counters = [Counter.remote() for _ in range(10)]
    # Increment each Counter once and get the results. These tasks all happen in parallel.
    results = ray.get([c.increment.remote() for c in counters])
    assert results == [1] * 10
    # Increment the first Counter five times. These tasks are executed serially and share state.
    results = ray.get([counters[0].increment.remote() for _ in range(5)])
    assert results == [2, 3, 4, 5, 6]
    for c in counters:
        ray.kill(c)


def test_passing_around_actor_handles(cluster):
    @ray.remote
    def f(counter):
        for _ in range(10):
            time.sleep(0.02)
            counter.increment.remote()

    counter = Counter.remote()
    # Start some tasks that use the actor.
    refs = [f.remote(counter) for _ in range(3)]
    ray.get(refs)
    # The counter goes up to 30 (each task's calls are in order; the gets follow them).
    seen = [ray.get(counter.get_counter.remote()) for _ in range(20)]
    assert seen == sorted(seen) and 0 < seen[-1] <= 30
    deadline = time.monotonic() + 10
    while ray.get(counter.get_counter.remote()) < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.get(counter.get_counter.remote()) == 30


def test_named_actors(cluster):
    # Create an actor with a name
    # (kept: as in Ray 2.60, a named actor that is not detached ends with its creator's handles,
    # and a handle got by name does not count)
    creator = Counter.options(name="some_name").remote()
    # Retrieve the actor later somewhere
    counter = ray.get_actor("some_name")
    assert ray.get(counter.increment.remote()) == 1
    # get-or-create
    same = Counter.options(name="some_name", get_if_exists=True).remote()
    assert ray.get(same.increment.remote()) == 2

    # Namespaces: an actor made in namespace "colors" is found there, not in this job's own.
    @ray.remote
    class Actor:
        pass

    Actor.options(name="orange", namespace="colors", lifetime="detached").remote()
    assert ray.get_actor("orange", namespace="colors") is not None
    with pytest.raises(ValueError):
        ray.get_actor("orange")
    ray.kill(ray.get_actor("orange", namespace="colors"))
    ray.kill(counter)
    del creator


def test_async_actor_page(cluster):
    @ray.remote
    class AsyncActor:
        # multiple invocation of this method can be running in
        # the event loop at the same time
        async def run_concurrent(self):
            await asyncio.sleep(0.5)  # concurrent workload here
            return "finished"

    actor = AsyncActor.remote()
    # regular ray.get
    start = time.monotonic()
    assert ray.get([actor.run_concurrent.remote() for _ in range(4)]) == ["finished"] * 4
    assert time.monotonic() - start < 1.5  # the four ran at once

    # async ray.get
    async def async_get():
        return await actor.run_concurrent.remote()
    assert asyncio.run(async_get()) == "finished"


def test_object_refs_as_futures(cluster):
    @ray.remote
    def some_task():
        return 1

    async def await_obj_ref():
        assert await some_task.remote() == 1
        done, _ = await asyncio.wait([asyncio.ensure_future(some_task.remote())])
        return [d.result() for d in done]

    assert asyncio.run(await_obj_ref()) == [1]

    # ObjectRefs as concurrent.futures.Futures
    refs = [some_task.remote() for _ in range(4)]
    futs = [ref.future() for ref in refs]
    results = []
    for fut in concurrent.futures.as_completed(futs):
        assert fut.done()
        results.append(fut.result())
    assert results == [1, 1, 1, 1]

    # asyncio.wrap_future, as the page does
    async def convert_to_asyncio_future():
        ref = some_task.remote()
        fut = asyncio.wrap_future(ref.future())
        return await fut
    assert asyncio.run(convert_to_asyncio_future()) == 1


def test_async_actor_max_concurrency(cluster):
    @ray.remote
    class AsyncActor:
        async def run_task(self):
            await asyncio.sleep(0.3)  # Network, I/O task here

    actor = AsyncActor.options(max_concurrency=2).remote()
    ray.get(actor.run_task.remote())
    # Only 2 tasks will be running concurrently. Once 2 finish, the next 2 should run.
    start = time.monotonic()
    ray.get([actor.run_task.remote() for _ in range(8)])
    took = time.monotonic() - start
    assert 1.15 < took < 2.5, took  # four rounds of 0.3 s


def test_threaded_actors(cluster):
    @ray.remote
    class ThreadedActor:
        def task_1(self):
            time.sleep(0.3)
            return threading.current_thread().name

        def task_2(self):
            time.sleep(0.3)
            return threading.current_thread().name

    a = ThreadedActor.options(max_concurrency=2).remote()
    start = time.monotonic()
    names = ray.get([a.task_1.remote(), a.task_2.remote()])
    assert time.monotonic() - start < 0.55 and names[0] != names[1]


def test_await_inside_an_async_method(cluster):
    # "AsyncIO for Actors": awaiting refs inside a method.
    @ray.remote
    def some_task(x):
        return x

    @ray.remote
    class Gatherer:
        async def total(self, n):
            values = await asyncio.gather(*[some_task.remote(i) for i in range(n)])
            return sum(values) + await some_task.remote(100)

    g = Gatherer.remote()
    assert ray.get(g.total.remote(10)) == 145


def test_concurrency_groups_page(cluster):
    @ray.remote(concurrency_groups={"io": 2, "compute": 4})
    class AsyncIOActor:
        def __init__(self):
            self.running = {}
            self.peak = {}

        async def _track(self, group):
            self.running[group] = self.running.get(group, 0) + 1
            self.peak[group] = max(self.peak.get(group, 0), self.running[group])
            await asyncio.sleep(0.1)
            self.running[group] -= 1

        @ray.method(concurrency_group="io")
        async def f1(self):
            await self._track("io")

        @ray.method(concurrency_group="io")
        async def f2(self):
            await self._track("io")

        @ray.method(concurrency_group="compute")
        async def f3(self):
            await self._track("compute")

        @ray.method(concurrency_group="compute")
        async def f4(self):
            await self._track("compute")

        async def f5(self):
            await self._track("default")

        def peaks(self):
            return self.peak

    a = AsyncIOActor.remote()
    refs = []
    for _ in range(6):
        refs += [a.f1.remote(),   # executed in the "io" group.
                 a.f2.remote(),   # executed in the "io" group.
                 a.f3.remote(),   # executed in the "compute" group.
                 a.f4.remote(),   # executed in the "compute" group.
                 a.f5.remote()]   # executed in the default group.
    ray.get(refs)
    peaks = ray.get(a.peaks.remote())
    assert peaks["io"] == 2 and peaks["compute"] == 4 and peaks["default"] == 6

    # You can also override the concurrency group at runtime: five f2 calls
    # in "compute" run at most 4 at once (in "io", 2).
    a2 = AsyncIOActor.remote()
    ray.get([a2.f2.options(concurrency_group="compute").remote() for _ in range(5)])
    assert ray.get(a2.peaks.remote())["io"] == 4


def test_concurrency_group_that_is_not_defined_is_refused():
    with pytest.raises(ValueError, match="does not define"):
        @ray.remote(concurrency_groups={"io": 2})
        class A:
            @ray.method(concurrency_group="cpu")
            def f(self):
                pass


def test_max_pending_calls(cluster):
    # docs.ray.io/en/latest/ray-core/api/doc/ray.actor.ActorClass.options.html:
    # "max_pending_calls: Set the max number of pending calls allowed on the
    # actor handle. When this value is exceeded, PendingCallsLimitExceeded
    # will be raised for further tasks. Note that this limit is counted per
    # handle. -1 means that the number of pending calls is unlimited."
    @ray.remote
    class Slow:
        def work(self, t):
            time.sleep(t)
            return t

    # Right after creation (the calls go through the raylet while the actor starts).
    a = Slow.options(max_pending_calls=2).remote()
    first = [a.work.remote(0.3), a.work.remote(0.3)]
    with pytest.raises(ray.exceptions.PendingCallsLimitExceeded):
        a.work.remote(0)
    assert ray.get(first) == [0.3, 0.3]
    assert ray.get(a.work.remote(0)) == 0  # room again
    # Once calls go straight to the actor's worker.
    for _ in range(3):
        ray.get(a.work.remote(0))
    busy = [a.work.remote(0.3), a.work.remote(0.3)]
    with pytest.raises(ray.exceptions.PendingCallsLimitExceeded):
        a.work.remote(0)
    ray.get(busy)
    # Unlimited by default.
    b = Slow.remote()
    assert ray.get([b.work.remote(0) for _ in range(50)]) == [0] * 50
