"""ray.util.ActorPool as Ray's `python/ray/tests/test_actor_pool.py` checks it (ray-project/ray); each
test is named after the Ray test it follows."""
import time

import pytest

import ray
from ray.util import ActorPool


@ray.remote
class MyActor:
    def __init__(self):
        pass

    def f(self, x):
        return x + 1

    def double(self, x):
        return 2 * x

    def sleep_then(self, x):
        time.sleep(x)
        return x


def test_get_next(ray_start_regular_shared):
    actors = [MyActor.remote() for _ in range(4)]
    pool = ActorPool(actors)
    for i in range(5):
        pool.submit(lambda a, v: a.f.remote(v), i)
        assert pool.get_next() == i + 1


def test_get_next_unordered(ray_start_regular_shared):
    actors = [MyActor.remote() for _ in range(4)]
    pool = ActorPool(actors)
    total = []
    for i in range(5):
        pool.submit(lambda a, v: a.f.remote(v), i)
    while pool.has_next():
        total += [pool.get_next_unordered()]
    assert all(elem in [1, 2, 3, 4, 5] for elem in total)


def test_map(ray_start_regular_shared):
    actors = [MyActor.remote() for _ in range(4)]
    pool = ActorPool(actors)
    index = 0
    for v in pool.map(lambda a, v: a.double.remote(v), range(5)):
        assert v == 2 * index
        index += 1
    assert index == 5


def test_map_unordered(ray_start_regular_shared):
    actors = [MyActor.remote() for _ in range(4)]
    pool = ActorPool(actors)
    total = []
    for v in pool.map_unordered(lambda a, v: a.double.remote(v), range(5)):
        total += [v]
    assert sorted(total) == [0, 2, 4, 6, 8]


def test_map_gh23107(ray_start_regular_shared):
    """A map after a submit whose result is slow: map gives its own results without waiting for it."""
    import asyncio

    @ray.remote
    class DummyActor:
        async def identity(self, s):
            if s == 6:
                await asyncio.sleep(30)
            return s

    pool = ActorPool([DummyActor.remote() for _ in range(2)])
    pool.submit(lambda a, v: a.identity.remote(v), 6)
    start = time.monotonic()
    assert sorted(pool.map(lambda a, v: a.identity.remote(v), [1, 2, 3, 4, 5])) == [1, 2, 3, 4, 5]
    assert time.monotonic() - start < 20


def test_get_next_timeout(ray_start_regular_shared):
    actors = [MyActor.remote() for _ in range(4)]
    pool = ActorPool(actors)
    pool.submit(lambda a, v: a.sleep_then.remote(v), 10)
    with pytest.raises(TimeoutError):
        pool.get_next(timeout=0.1)


def test_get_next_unordered_timeout(ray_start_regular_shared):
    actors = [MyActor.remote() for _ in range(4)]
    pool = ActorPool(actors)
    pool.submit(lambda a, v: a.sleep_then.remote(v), 10)
    with pytest.raises(TimeoutError):
        pool.get_next_unordered(timeout=0.1)


def test_multiple_returns(ray_start_regular_shared):
    @ray.remote
    class Two:
        @ray.method(num_returns=2)
        def pair(self, x):
            return x, x + 1

    pool = ActorPool([Two.remote() for _ in range(2)])
    for i in range(3):
        pool.submit(lambda a, v: a.pair.remote(v), i)
    while pool.has_next():
        assert len(pool.get_next()) == 2


def test_pop_idle(ray_start_regular_shared):
    actors = [MyActor.remote() for _ in range(1)]
    pool = ActorPool(actors)
    pool.submit(lambda a, v: a.double.remote(v), 1)
    assert pool.pop_idle() is None
    assert pool.has_free() is False
    assert pool.get_next() == 2
    assert pool.has_free()
    assert pool.pop_idle() is not None
    assert pool.has_free() is False


def test_push(ray_start_regular_shared):
    a1, a2 = MyActor.remote(), MyActor.remote()
    pool = ActorPool([a1])
    pool.submit(lambda a, v: a.double.remote(v), 1)
    assert pool.has_free() is False
    pool.push(a2)
    assert pool.has_free()
    with pytest.raises(ValueError):
        pool.push(a2)  # already in the pool
    assert pool.get_next() == 2


def test_map_error(ray_start_regular_shared):
    @ray.remote
    class Fails:
        def f(self, x):
            if x == 2:
                raise ValueError("two")
            return x

    pool = ActorPool([Fails.remote() for _ in range(2)])
    with pytest.raises(ValueError, match="two"):
        list(pool.map(lambda a, v: a.f.remote(v), range(4)))


def test_submit_queues_past_pool_size(ray_start_regular_shared):
    pool = ActorPool([MyActor.remote() for _ in range(2)])
    for i in range(10):
        pool.submit(lambda a, v: a.f.remote(v), i)
    assert [pool.get_next() for _ in range(10)] == list(range(1, 11))
    assert not pool.has_next()


def test_get_next_without_pending_is_an_error(ray_start_regular_shared):
    pool = ActorPool([MyActor.remote()])
    with pytest.raises(StopIteration):
        pool.get_next()
