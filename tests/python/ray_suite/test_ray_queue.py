"""ray.util.queue as Ray's `python/ray/tests/test_queue.py` checks it (ray-project/ray); each test is
named after the Ray test it follows."""
import asyncio

import pytest

import ray
from ray.util.queue import Empty, Full, Queue


def test_simple_usage(ray_start_regular_shared):
    q = Queue()
    items = list(range(10))
    for item in items:
        q.put(item)
    for item in items:
        assert item == q.get()


def test_get(ray_start_regular_shared):
    q = Queue()
    item = 0
    q.put(item)
    assert q.get(block=False) == item
    item = 1
    q.put(item)
    assert q.get(timeout=0.2) == item
    with pytest.raises(ValueError):
        q.get(timeout=-1)
    with pytest.raises(Empty):
        q.get_nowait()
    with pytest.raises(Empty):
        q.get(timeout=0.2)


def test_put(ray_start_regular_shared):
    q = Queue(1)
    item = 0
    q.put(item, block=False)
    assert q.get() == item
    item = 1
    q.put(item, timeout=0.2)
    assert q.get() == item
    with pytest.raises(ValueError):
        q.put(0, timeout=-1)
    q.put(0)
    with pytest.raises(Full):
        q.put_nowait(1)
    with pytest.raises(Full):
        q.put(1, timeout=0.2)


def test_async_get(ray_start_regular_shared):
    q = Queue()

    async def main():
        future = asyncio.ensure_future(q.get_async())
        await asyncio.sleep(0.01)
        assert not future.done()
        q.put(1)
        return await asyncio.wait_for(future, 30)

    assert asyncio.run(main()) == 1


def test_async_put(ray_start_regular_shared):
    q = Queue(1)

    async def main():
        await q.put_async(1)
        future = asyncio.ensure_future(q.put_async(2))
        await asyncio.sleep(0.01)
        assert not future.done()
        assert await q.get_async() == 1
        await asyncio.wait_for(future, 30)
        return await q.get_async()

    assert asyncio.run(main()) == 2


def test_concurrent_get(ray_start_regular_shared):
    q = Queue()

    @ray.remote
    def get(queue):
        return queue.get()

    future = get.remote(q)
    ready, _ = ray.wait([future], timeout=0.1)
    assert not ready
    q.put(1)
    assert ray.get(future, timeout=30) == 1


def test_concurrent_put(ray_start_regular_shared):
    q = Queue(1)
    q.put(1)

    @ray.remote
    def put(queue):
        queue.put(2)
        return True

    future = put.remote(q)
    ready, _ = ray.wait([future], timeout=0.1)
    assert not ready
    assert q.get() == 1
    assert ray.get(future, timeout=30)
    assert q.get() == 2


def test_batch(ray_start_regular_shared):
    q = Queue(1)
    with pytest.raises(Full):
        q.put_nowait_batch([1, 2])
    with pytest.raises(Empty):
        q.get_nowait_batch(1)
    big_q = Queue(100)
    big_q.put_nowait_batch(list(range(100)))
    assert big_q.get_nowait_batch(100) == list(range(100))


def test_qsize(ray_start_regular_shared):
    q = Queue()
    items = list(range(10))
    size = 0
    assert q.qsize() == size
    assert q.empty()
    for item in items:
        q.put(item)
        size += 1
        assert q.qsize() == size
    for item in items:
        assert q.get() == item
        size -= 1
        assert q.qsize() == size
    assert q.size() == 0 if hasattr(q, "size") else True


def test_full(ray_start_regular_shared):
    q = Queue(2)
    assert not q.full()
    q.put(1)
    q.put(2)
    assert q.full()


def test_shutdown(ray_start_regular_shared):
    q = Queue()
    actor = q.actor
    q.shutdown()
    assert q.actor is None
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.empty.remote(), timeout=30)


def test_custom_resources(shutdown_only, init_kwargs):
    ray.init(num_cpus=1, resources={"custom": 1.0}, **init_kwargs)
    q = Queue(actor_options={"num_cpus": 1, "resources": {"custom": 1}})
    q.put(1)
    assert q.get() == 1
    from suite_utils import wait_for_condition
    # (each node reports what is free on a heartbeat, in Ray and in phalanx alike: polled)
    wait_for_condition(lambda: ray.available_resources().get("custom", 0) == 0)


def test_queue_passed_to_actor(ray_start_regular_shared):
    q = Queue()

    @ray.remote
    class Producer:
        def produce(self, queue, n):
            for i in range(n):
                queue.put(i)

    ray.get(Producer.remote().produce.remote(q, 5))
    assert [q.get(timeout=10) for _ in range(5)] == list(range(5))
