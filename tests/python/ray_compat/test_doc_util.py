"""Ray's utility pages, as the documentation writes them, with
`import phalanx as ray`: ActorPool (docs.ray.io/en/latest/ray-core/api/doc/
ray.util.ActorPool.html), Queue (.../ray-core/actors/actor-utils.html),
the runtime context (.../api/doc/ray.runtime_context.RuntimeContext.html)
and the collective library's send/recv (.../ray-more-libs/ray-collective.html)."""
import numpy as np

import phalanx as ray


def test_actor_pool(cluster):
    from phalanx.util import ActorPool  # ray.util.ActorPool

    @ray.remote
    class Actor:
        def double(self, n):
            return n * 2

    a1, a2 = Actor.remote(), Actor.remote()
    pool = ActorPool([a1, a2])
    # pool.map(..) returns a Python generator object ActorPool.map
    gen = pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])
    assert list(gen) == [2, 4, 6, 8]

    gen = pool.map_unordered(lambda a, v: a.double.remote(v), [1, 2, 3, 4])
    assert sorted(gen) == [2, 4, 6, 8]

    pool.submit(lambda a, v: a.double.remote(v), 1)
    assert pool.has_next()
    assert pool.get_next() == 2
    assert not pool.has_next()

    pool.submit(lambda a, v: a.double.remote(v), 1)
    pool.submit(lambda a, v: a.double.remote(v), 2)
    assert sorted([pool.get_next_unordered(), pool.get_next_unordered()]) == [2, 4]

    assert pool.has_free()
    idle = pool.pop_idle()
    assert idle in (a1, a2)
    pool.push(idle)
    try:
        pool.push(idle)
        raise AssertionError("pushed twice")
    except ValueError:
        pass


def test_queue(cluster):
    from phalanx.util.queue import Empty, Full, Queue  # ray.util.queue

    # You can pass this object around to different tasks/actors
    queue = Queue(maxsize=100)

    @ray.remote
    def consumer(id, queue):
        got = []
        try:
            while True:
                next_item = queue.get(block=True, timeout=1)
                got.append(next_item)
        except Empty:
            pass
        return got

    [queue.put(i) for i in range(10)]
    consumers = [consumer.remote(id, queue) for id in range(2)]
    got = ray.get(consumers)
    assert sorted(got[0] + got[1]) == list(range(10))

    small = Queue(maxsize=1)
    small.put("a")
    assert small.full() and small.qsize() == 1
    try:
        small.put("b", timeout=0.1)
        raise AssertionError("put into a full queue")
    except Full:
        pass
    try:
        small.put_nowait("b")
        raise AssertionError("put into a full queue")
    except Full:
        pass
    assert small.get_nowait() == "a"
    try:
        small.get_nowait()
        raise AssertionError("got from an empty queue")
    except Empty:
        pass
    q = Queue()
    q.put_nowait_batch([1, 2, 3])
    assert q.get_nowait_batch(2) == [1, 2] and len(q) == 1

    async def async_use():
        await q.put_async(4)
        first, second = await q.get_async(), await q.get_async()
        try:
            await q.get_async(timeout=0.1)
            raise AssertionError("got from an empty queue")
        except Empty:
            pass
        return first, second
    import asyncio
    assert asyncio.run(async_use()) == (3, 4)
    q.shutdown()


def test_runtime_context(cluster):
    ctx = ray.get_runtime_context()
    job = ctx.get_job_id()
    assert ctx.get_task_id() is None and ctx.get_actor_id() is None
    assert ctx.get_node_id() == ray.get_node_id()

    @ray.remote(num_cpus=1, resources={})
    def task_context():
        c = ray.get_runtime_context()
        return c.get_job_id(), c.get_task_id(), c.get_actor_id(), c.get_assigned_resources(), c.get_node_id()

    tjob, task_id, actor_id, assigned, node = ray.get(task_context.remote())
    assert tjob == job and task_id and actor_id is None and assigned == {"CPU": 1.0} and node == ray.get_node_id()

    @ray.remote
    class Actor:
        def ids(self):
            c = ray.get_runtime_context()
            return c.get_actor_id(), c.current_actor, c.get_job_id(), c.namespace

        def ping(self):
            return "pong"

    a = Actor.remote()
    actor_id, me, ajob, ns = ray.get(a.ids.remote())
    assert actor_id == a._actor_id.hex() and me == a and ajob == job and ns == ctx.namespace
    assert ray.get(me.ping.remote()) == "pong"  # the handle works from the driver too
    assert ray.is_initialized()
    assert ray.cluster_resources()["CPU"] >= 2
    assert 0 <= ray.available_resources().get("CPU", 0) <= ray.cluster_resources()["CPU"]


def test_collective_send_recv_and_allreduce(cluster):
    import phalanx.util.collective as col

    @ray.remote
    class Member:
        def __init__(self, rank):
            self.rank = rank

        def init_collective_group(self, world_size, rank, backend, group_name):
            col.init_collective_group(world_size, rank, backend, group_name)
            return col.get_rank(group_name), col.get_collective_group_size(group_name)

        def exchange(self):
            x = np.full(4, float(self.rank + 1))
            col.allreduce(x, group_name="g")
            if self.rank == 0:
                col.send(np.arange(4.0), 1, group_name="g")
                y = np.zeros(4)
                col.recv(y, 1, group_name="g")
            else:
                y = np.zeros(4)
                col.recv(y, 0, group_name="g")
                col.send(y * 10, 0, group_name="g")
            col.barrier(group_name="g")
            return x.tolist(), y.tolist()

    members = [Member.remote(r) for r in range(2)]
    assert ray.get(col.create_collective_group(members, 2, [0, 1], backend="gloo", group_name="g"),
                   timeout=60) == [(0, 2), (1, 2)]
    (x0, y0), (x1, y1) = ray.get([m.exchange.remote() for m in members], timeout=60)
    assert x0 == x1 == [3.0] * 4
    assert y1 == [0.0, 1.0, 2.0, 3.0] and y0 == [0.0, 10.0, 20.0, 30.0]
