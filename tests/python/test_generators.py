"""Generators (phalanx/generator.py): tasks and actor methods that yield, read
by the caller as they are made, on one node and across two; backpressure,
dropping, a dying producer, and what stays in the store afterwards."""
import asyncio
import gc
import os
import time

import numpy as np
import pytest

import phalanx
from conftest import loopback_nodes, wait_until
from phalanx._private.api import cluster_stats


@phalanx.remote
def produce(n, size=0):
    for i in range(n):
        yield np.full(size, i, dtype=np.float64) if size else i


@phalanx.remote(_generator_backpressure_num_objects=2)
def stamped(n):
    for _ in range(n):
        yield time.time()


@phalanx.remote(max_retries=0)
def dies_after_two():
    yield 1
    yield 2
    time.sleep(0.2)
    os._exit(1)


@phalanx.remote
class Counter:
    def __init__(self):
        self.n = 0

    def forever(self):
        while True:
            self.n += 1
            yield self.n

    def count(self):
        return self.n


@phalanx.remote
class AsyncProducer:
    def __init__(self):
        self.made = 0

    async def stream(self, n):
        for i in range(n):
            self.made += 1
            await asyncio.sleep(0)
            yield i

    async def made_so_far(self):
        return self.made


def _stream_state():
    s = cluster_stats()
    return s["streams"], s["stream_items_held"]


def _settled():
    gc.collect()
    wait_until(lambda: _stream_state() == (0, 0), timeout=10, what="no stream left")


def test_a_generator_task_yields_refs_as_values_are_made(cluster):
    gen = produce.remote(5)
    assert isinstance(gen, phalanx.ObjectRefGenerator)
    assert [phalanx.get(r) for r in gen] == [0, 10 // 10, 2, 3, 4]
    with pytest.raises(StopIteration):
        next(gen)
    _settled()


def test_store_sized_items_and_a_partial_read_leave_nothing_behind(cluster):
    used = cluster_stats()["store_used"]
    gen = produce.remote(50, 1 << 17)  # 1 MiB each
    first = [next(gen) for _ in range(3)]
    assert [phalanx.get(r)[0] for r in first] == [0, 1, 2]
    del gen, first
    _settled()
    wait_until(lambda: cluster_stats()["store_used"] <= used, timeout=10, what="items freed from the store")


def test_the_producer_pauses_while_the_caller_falls_behind(cluster):
    gen = stamped.remote(6)
    time.sleep(1.0)  # unread: the producer makes 2 and waits
    t_read = time.time()
    stamps = [phalanx.get(r) for r in gen]
    assert len(stamps) == 6
    assert sum(s < t_read for s in stamps) == 2


def test_dropping_a_generator_stops_its_producer(cluster):
    c = Counter.remote()
    gen = c.forever.options(_generator_backpressure_num_objects=3).remote()
    assert phalanx.get(next(gen)) == 1
    del gen
    gc.collect()
    time.sleep(0.5)
    n = phalanx.get(c.count.remote(), timeout=10)  # the actor is free again: its generator was stopped
    time.sleep(0.3)
    assert phalanx.get(c.count.remote(), timeout=10) == n <= 5
    _settled()


def test_a_dying_producer_fails_the_next_item_not_a_hang(cluster):
    gen = dies_after_two.remote()
    assert [phalanx.get(next(gen), timeout=20), phalanx.get(next(gen), timeout=20)] == [1, 2]
    err = next(gen)
    with pytest.raises(phalanx.WorkerCrashedError, match="exited with code 1"):
        phalanx.get(err, timeout=20)
    with pytest.raises(StopIteration):
        next(gen)


def test_an_exception_in_the_generator_is_the_next_item(cluster):
    @phalanx.remote
    def fails():
        yield "ok"
        raise KeyError("boom")

    gen = fails.remote()
    assert phalanx.get(next(gen)) == "ok"
    with pytest.raises(KeyError, match="boom"):
        phalanx.get(next(gen))
    with pytest.raises(StopIteration):
        next(gen)


def test_async_actor_generators_stream_with_backpressure(cluster):
    # Beyond Ray: backpressure on an async actor's generator, while the
    # actor keeps answering other calls.
    a = AsyncProducer.remote()
    gen = a.stream.options(_generator_backpressure_num_objects=2).remote(10)
    first = next(gen)
    assert phalanx.get(first) == 0
    time.sleep(0.5)
    assert phalanx.get(a.made_so_far.remote(), timeout=10) <= 3
    assert [phalanx.get(r) for r in gen] == list(range(1, 10))


def test_async_iteration_and_wait_on_generators(cluster):
    async def read():
        return [await r async for r in produce.remote(4)]
    assert asyncio.run(read()) == [0, 1, 2, 3]

    gen = stamped.options(_generator_backpressure_num_objects=-1).remote(3)
    ready, _ = phalanx.wait([gen], timeout=10)
    assert ready == [gen]
    assert len([phalanx.get(r) for r in gen]) == 3
    ready, _ = phalanx.wait([gen], timeout=0)  # over: next() would not block
    assert ready == [gen]


def test_dynamic_returns_one_ref_to_the_items_refs(cluster):
    ref = produce.options(num_returns="dynamic").remote(4)
    assert isinstance(ref, phalanx.ObjectRef)
    items = phalanx.get(ref)
    assert isinstance(items, phalanx.DynamicObjectRefGenerator)
    assert [phalanx.get(r) for r in items] == [0, 1, 2, 3]
    del ref, items
    _settled()


def test_a_task_reading_a_generator_lends_its_cpu_to_the_producer(fresh_cluster):
    # One CPU: the reader holds it while it waits for an item, unless it lends it
    # (as it does in a get); the producer would never run.
    fresh_cluster(num_cpus=1)

    @phalanx.remote
    def total(n):
        return sum(phalanx.get(ref) for ref in produce.remote(n))

    assert phalanx.get(total.remote(5), timeout=60) == 10


def test_bad_generator_use_is_a_clear_error(cluster):
    def plain(x):
        return x

    with pytest.raises(TypeError, match="needs a generator function"):
        phalanx.remote(num_returns="streaming")(plain)
    with pytest.raises(ValueError, match="applies to num_returns='streaming' only"):
        produce.options(num_returns="dynamic", _generator_backpressure_num_objects=2)
    with pytest.raises(ValueError, match="_generator_backpressure_num_objects must be"):
        produce.options(_generator_backpressure_num_objects=0)
    with pytest.raises(TypeError, match="cannot be passed to another task"):
        phalanx.get(phalanx.remote(plain).remote(produce.remote(1)))

    @phalanx.remote
    class NotAGenerator:
        def f(self):
            return 1
    a = NotAGenerator.remote()
    gen = a.f.options(num_returns="streaming").remote()
    with pytest.raises(TypeError, match="not a generator"):
        phalanx.get(next(gen), timeout=20)


@phalanx.remote(resources={"far": 1})
def produce_far(n, size):
    for i in range(n):
        yield np.full(size, i, dtype=np.float64)


@phalanx.remote(resources={"far": 1})
class FarProducer:
    def stream(self, n, size):
        for i in range(n):
            yield np.full(size, i, dtype=np.float64)

    async def astream(self, n):
        for i in range(n):
            yield i


def test_generators_on_another_node():
    with loopback_nodes([None, {"far": 4}]):
        for size in (4, 1 << 17):  # inline items, and store items copied from the producer's node
            assert [phalanx.get(r)[0] for r in produce_far.remote(20, size)] == list(range(20))
            a = FarProducer.remote()
            assert [phalanx.get(r)[0] for r in a.stream.remote(20, size)] == list(range(20))
        assert [phalanx.get(r) for r in FarProducer.remote().astream.remote(5)] == list(range(5))
        dyn = phalanx.get(produce_far.options(num_returns="dynamic").remote(5, 4))
        assert [phalanx.get(r)[0] for r in dyn] == list(range(5))
        gen = produce_far.remote(100, 1 << 17)
        next(gen)
        del gen, dyn
        _settled()
