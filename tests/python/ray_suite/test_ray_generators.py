"""Generator tasks as Ray's `python/ray/tests/test_generators.py` and `test_streaming_generator.py`
check them (ray-project/ray); each test is named after the Ray test it follows."""
import time

import numpy as np
import pytest

import ray


def test_generator_returns(ray_start_regular_shared):
    @ray.remote(num_returns=3)
    def static(n):
        for i in range(n):
            yield i

    refs = static.remote(3)
    assert ray.get(refs) == [0, 1, 2]

    @ray.remote
    class Actor:
        @ray.method(num_returns=2)
        def two(self):
            yield "a"
            yield "b"

    assert ray.get(Actor.remote().two.remote()) == ["a", "b"]


def test_generator_errors(ray_start_regular_shared):
    @ray.remote(num_returns=3)
    def partial():
        yield 1
        raise ValueError("after one")

    refs = partial.remote()
    assert ray.get(refs[0]) == 1
    for ref in refs[1:]:
        with pytest.raises(ValueError, match="after one"):
            ray.get(ref)


def test_generator_too_many_yields(ray_start_regular_shared):
    @ray.remote(num_returns=2)
    def many():
        for i in range(3):
            yield i

    # Ray logs "Task returned more than num_returns=2 objects" and keeps the first two.
    assert ray.get(many.remote(), timeout=30) == [0, 1]


def test_dynamic_generator(ray_start_regular_shared):
    @ray.remote(num_returns="dynamic")
    def dynamic(n):
        for i in range(n):
            yield np.full(4, i)

    gen_ref = dynamic.remote(5)
    gen = ray.get(gen_ref)
    values = [ray.get(ref) for ref in gen]
    assert [int(v[0]) for v in values] == list(range(5))

    @ray.remote
    def read(gen):
        return sum(int(ray.get(r)[0]) for r in gen)

    assert ray.get(read.remote(gen_ref)) == 10


def test_streaming_generator_basic(ray_start_regular_shared):
    @ray.remote
    def stream(n):
        for i in range(n):
            yield i

    gen = stream.remote(5)
    assert isinstance(gen, ray.ObjectRefGenerator)
    assert [ray.get(ref) for ref in gen] == list(range(5))


def test_streaming_generator_num_returns_streaming(ray_start_regular_shared):
    @ray.remote(num_returns="streaming")
    def stream(n):
        for i in range(n):
            yield i * 10

    assert [ray.get(r) for r in stream.remote(3)] == [0, 10, 20]


def test_streaming_generator_next_and_stop(ray_start_regular_shared):
    @ray.remote
    def stream():
        yield 1
        yield 2

    gen = stream.remote()
    assert ray.get(next(gen)) == 1
    assert ray.get(next(gen)) == 2
    with pytest.raises(StopIteration):
        next(gen)


def test_streaming_generator_error_mid_stream(ray_start_regular_shared):
    @ray.remote
    def stream():
        yield 1
        raise RuntimeError("stream broke")

    gen = stream.remote()
    assert ray.get(next(gen)) == 1
    with pytest.raises(RuntimeError, match="stream broke"):
        ray.get(next(gen))


def test_streaming_generator_items_arrive_before_end(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Gate:
        def __init__(self):
            self.open = False

        def set(self):
            self.open = True

        def is_open(self):
            return self.open

    @ray.remote
    def stream(gate):
        yield "first"
        while not ray.get(gate.is_open.remote()):
            time.sleep(0.01)
        yield "second"

    gate = Gate.remote()
    gen = stream.remote(gate)
    assert ray.get(next(gen), timeout=30) == "first"  # before the task finished
    ray.get(gate.set.remote())
    assert ray.get(next(gen), timeout=30) == "second"


def test_actor_streaming_generator(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def stream(self, n):
            for i in range(n):
                yield i

    a = Actor.remote()
    assert [ray.get(r) for r in a.stream.remote(4)] == [0, 1, 2, 3]


def test_async_actor_streaming_generator(ray_start_regular_shared):
    @ray.remote
    class AsyncActor:
        async def stream(self, n):
            for i in range(n):
                yield i

    a = AsyncActor.remote()
    assert [ray.get(r) for r in a.stream.remote(3)] == [0, 1, 2]


def test_streaming_generator_async_iteration(ray_start_regular_shared):
    import asyncio

    @ray.remote
    def stream(n):
        for i in range(n):
            yield i

    async def consume():
        out = []
        async for ref in stream.remote(4):
            out.append(await ref)
        return out

    assert asyncio.run(consume()) == [0, 1, 2, 3]


def test_streaming_generator_wait(ray_start_regular_shared):
    @ray.remote
    def stream(n):
        for i in range(n):
            yield i

    gen = stream.remote(3)
    ready, _ = ray.wait([gen], timeout=30)
    assert ready == [gen]
    assert ray.get(next(gen)) == 0


def test_generator_large_items(ray_start_regular_shared):
    @ray.remote
    def stream():
        for i in range(3):
            yield np.full(1024 * 1024, i, dtype=np.int64)

    assert [int(ray.get(r)[0]) for r in stream.remote()] == [0, 1, 2]


def test_generator_passed_to_task(ray_start_regular_shared):
    @ray.remote
    def stream():
        for i in range(4):
            yield i

    @ray.remote
    def total(refs):
        return sum(ray.get(refs))

    refs = list(stream.remote())
    assert ray.get(total.remote(refs)) == 6


def test_generator_options_num_returns(ray_start_regular_shared):
    @ray.remote
    def gen():
        yield 1
        yield 2

    a, b = gen.options(num_returns=2).remote()
    assert ray.get([a, b]) == [1, 2]


def test_generator_cancel(ray_start_regular_shared):
    @ray.remote
    def forever():
        i = 0
        while True:
            yield i
            i += 1
            time.sleep(0.01)

    gen = forever.remote()
    assert ray.get(next(gen), timeout=30) == 0
    ray.cancel(gen)
    with pytest.raises((ray.exceptions.TaskCancelledError, StopIteration, ray.exceptions.RayTaskError)):
        for _ in range(10000):
            ray.get(next(gen), timeout=30)
