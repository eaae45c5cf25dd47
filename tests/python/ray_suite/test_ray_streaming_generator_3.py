"""Streaming generators as Ray's `python/ray/tests/test_streaming_generator_3.py` checks them (ray-project/ray, the
version at fb10c494): generators of threaded and async actors consumed from asyncio, generators of actors spread
over a cluster, generators in `ray.wait` (alone, mixed with plain refs, with a timeout, with num_returns and with
backpressure), and a generator's `completed()` / `next_ready()` / `is_finished()`. Each test is named after the Ray
test it follows and checks what it checks.

Changed, for `import ray` only: `ObjectRefGenerator` is `ray.ObjectRefGenerator` (Ray's public name for
`ray._raylet.ObjectRefGenerator`). test_threaded_actor_generator starts its cluster with
`ray.init(address="local", **init_kwargs)` (Ray's: `ray.init()`; a cluster of its own, whatever else runs on this
machine, without Ray's dashboard). test_generator_wait waits for the generator task with
`ray.get(gen.completed())` (Ray's test: `ray.get(gen._generator_ref)`, the private attribute `completed()`
returns). test_generator_dist_gather connects with `ray.init(address=cluster.address)` (Ray's: `ray.init()`,
which finds the cluster through Ray's own address file) and does not print
`ray._private.internal_api.memory_summary(stats_only=True)` at its end (a print of Ray's internals; it checks
nothing).

test_generator_wait_e2e runs 8 short tasks first (`ray.get([g.remote(1) for _ in range(8)])`), so that the 8
workers it times are started before its clock starts: on this 2-core machine starting them takes more than the
2 s of slack its `elapsed < 4` allows (4.3 s and 4.6 s on Ray 2.60 without the warm-up), which is not what it
checks (that 4 generators and 4 tasks of 2 s run side by side, with and without backpressure).
test_completed_next_ready_is_finished expects `TaskCancelledError` for the cancelled generator, as Ray's newer
version of the file does and Ray 2.60 raises (fb10c494's expects WorkerCrashedError).

Left out: test_streaming_generator_load, in fb10c494's version only (Ray Serve, FastAPI and
`ray.util.state.list_actors`, which needs Ray's dashboard; this machine's Ray has neither Serve's dependencies nor
the dashboard, and the test runs 25 s and more of HTTP load)."""
import asyncio
import sys
import time
from collections import Counter

import numpy as np
import pytest

import ray
from ray.exceptions import TaskCancelledError
from suite_utils import phalanx_differs

ObjectRefGenerator = ray.ObjectRefGenerator


def test_threaded_actor_generator(shutdown_only, init_kwargs):
    ray.init(address="local", **init_kwargs)

    @ray.remote(max_concurrency=10)
    class Actor:
        def f(self):
            for i in range(30):
                time.sleep(0.1)
                yield np.ones(1024 * 1024) * i

    @ray.remote(max_concurrency=20)
    class AsyncActor:
        async def f(self):
            for i in range(30):
                await asyncio.sleep(0.1)
                yield np.ones(1024 * 1024) * i

    async def main():
        a = Actor.remote()
        asy = AsyncActor.remote()

        async def run():
            i = 0
            async for ref in a.f.remote():
                val = ray.get(ref)
                print(val)
                print(ref)
                assert np.array_equal(val, np.ones(1024 * 1024) * i)
                i += 1
                del ref

        async def run2():
            i = 0
            async for ref in asy.f.remote():
                val = await ref
                print(ref)
                print(val)
                assert np.array_equal(val, np.ones(1024 * 1024) * i), ref
                i += 1
                del ref

        coroutines = [run() for _ in range(10)]
        coroutines = [run2() for _ in range(20)]

        await asyncio.gather(*coroutines)

    asyncio.run(main())


def test_generator_dist_gather(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=0, object_store_memory=1 * 1024 * 1024 * 1024)
    ray.init(address=cluster.address)
    cluster.add_node(num_cpus=1)
    cluster.add_node(num_cpus=1)
    cluster.add_node(num_cpus=1)
    cluster.add_node(num_cpus=1)

    @ray.remote(num_cpus=1)
    class Actor:
        def __init__(self, child=None):
            self.child = child

        def get_data(self):
            for _ in range(10):
                time.sleep(0.1)
                yield np.ones(5 * 1024 * 1024)

    async def all_gather():
        actor = Actor.remote()
        async for ref in actor.get_data.remote():
            val = await ref
            assert np.array_equal(np.ones(5 * 1024 * 1024), val)
            del ref

    async def main():
        await asyncio.gather(all_gather(), all_gather(), all_gather(), all_gather())

    asyncio.run(main())


def test_generator_wait(shutdown_only):
    """
    Make sure the generator works with ray.wait.
    """
    ray.init(num_cpus=8)

    @ray.remote
    def f(sleep_time):
        for i in range(2):
            time.sleep(sleep_time)
            yield i

    @ray.remote
    def g(sleep_time):
        time.sleep(sleep_time)
        return 10

    gen = f.remote(1)

    """
    Test basic cases.
    """
    for expected_rval in [0, 1]:
        s = time.time()
        r, ur = ray.wait([gen], num_returns=1)
        print(time.time() - s)
        assert len(r) == 1
        assert ray.get(next(r[0])) == expected_rval
        assert len(ur) == 0

    # Should raise a stop iteration.
    for _ in range(3):
        s = time.time()
        r, ur = ray.wait([gen], num_returns=1)
        print(time.time() - s)
        assert len(r) == 1
        with pytest.raises(StopIteration):
            assert next(r[0]) == 0
        assert len(ur) == 0

    gen = f.remote(0)
    # Wait until the generator task finishes
    ray.get(gen.completed())
    for i in range(2):
        r, ur = ray.wait([gen], timeout=0)
        assert len(r) == 1
        assert len(ur) == 0
        assert ray.get(next(r[0])) == i

    """
    Test the case ref is mixed with regular object ref.
    """
    gen = f.remote(0)
    ref = g.remote(3)
    ready, unready = [], [gen, ref]
    result_set = set()
    while unready:
        ready, unready = ray.wait(unready)
        print(ready, unready)
        assert len(ready) == 1
        for r in ready:
            if isinstance(r, ObjectRefGenerator):
                try:
                    ref = next(r)
                    print(ref)
                    print(ray.get(ref))
                    result_set.add(ray.get(ref))
                except StopIteration:
                    pass
                else:
                    unready.append(r)
            else:
                result_set.add(ray.get(r))

    assert result_set == {0, 1, 10}

    """
    Test timeout.
    """
    gen = f.remote(3)
    ref = g.remote(1)
    ready, unready = ray.wait([gen, ref], timeout=2)
    assert len(ready) == 1
    assert len(unready) == 1

    """
    Test num_returns
    """
    gen = f.remote(1)
    ref = g.remote(1)
    ready, unready = ray.wait([ref, gen], num_returns=2)
    assert len(ready) == 2
    assert len(unready) == 0


@pytest.mark.parametrize("backpressure", [True, False])
def test_generator_wait_e2e(shutdown_only, backpressure):
    ray.init(num_cpus=8)

    if backpressure:
        threshold = 1
    else:
        threshold = -1

    @ray.remote
    def f(sleep_time):
        for i in range(2):
            time.sleep(sleep_time)
            yield i

    @ray.remote
    def g(sleep_time):
        time.sleep(sleep_time)
        return 10

    # (Not in Ray's test: its 8 workers started before the clock starts, see the module docstring.)
    ray.get([g.remote(1) for _ in range(8)])

    gen = [
        f.options(
            _generator_backpressure_num_objects=threshold,
        ).remote(1)
        for _ in range(4)
    ]
    ref = [g.remote(2) for _ in range(4)]
    ready, unready = [], [*gen, *ref]
    result = []
    start = time.time()
    while unready:
        ready, unready = ray.wait(unready, num_returns=len(unready), timeout=0.1)
        for r in ready:
            if isinstance(r, ObjectRefGenerator):
                try:
                    ref = next(r)
                    result.append(ray.get(ref))
                except StopIteration:
                    pass
                else:
                    unready.append(r)
            else:
                result.append(ray.get(r))
    elapsed = time.time() - start
    assert elapsed < 4
    assert 2 < elapsed

    assert len(result) == 12
    result = Counter(result)
    assert result[0] == 4
    assert result[1] == 4
    assert result[10] == 4


def test_completed_next_ready_is_finished(shutdown_only):
    @ray.remote
    def f():
        for _ in range(3):
            time.sleep(1)
            yield 1

    gen = f.remote()
    assert not gen.is_finished()
    assert not gen.next_ready()
    r, _ = ray.wait([gen])
    gen = r[0]
    assert gen.next_ready()
    _, ur = ray.wait([gen.completed()], timeout=0)
    assert len(ur) == 1

    # Consume object refs
    next(gen)
    assert not gen.is_finished()
    _, ur = ray.wait([gen.completed()], timeout=0)
    assert len(ur) == 1

    next(gen)
    assert not gen.is_finished()
    _, ur = ray.wait([gen.completed()], timeout=0)
    assert len(ur) == 1

    next(gen)
    with pytest.raises(StopIteration):
        next(gen)

    assert gen.is_finished()
    # Since the next should raise StopIteration,
    # it should be False.
    assert not gen.next_ready()
    r, _ = ray.wait([gen.completed()], timeout=0)
    assert len(r) == 1

    # Test the failed case.
    gen = f.remote()
    next(gen)
    ray.cancel(gen, force=True)
    r, _ = ray.wait([gen])
    assert len(r) == 1
    # The last exception is not taken yet.
    assert gen.next_ready()
    assert not gen.is_finished()
    with pytest.raises(TaskCancelledError):
        ray.get(gen.completed())
    with pytest.raises(TaskCancelledError):
        ray.get(next(gen))
    assert not gen.next_ready()
    assert gen.is_finished()


if __name__ == "__main__":
    sys.exit(pytest.main(["-sv", __file__]))
