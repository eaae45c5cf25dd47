"""Several raylets sharing one GCS (on loopback, each with its own ports):
tasks spill to nodes with free resources, custom resources route work to the
node that has them, and a node that dies has its running tasks retried
elsewhere."""
import os
import signal
import time

import numpy as np
import pytest

import phalanx
from phalanx._private import api
from conftest import loopback_nodes


@pytest.fixture
def three_nodes():
    """A head (1 CPU) that the driver uses, plus two 1-CPU nodes, one with {"sim": 1}."""
    with loopback_nodes([None, None, {"sim": 1}]) as node:
        yield node


@phalanx.remote
def where(delay):
    time.sleep(delay)
    return os.getppid()  # the raylet that started this worker


def test_tasks_spill_to_nodes_with_free_cpus(three_nodes):
    # More one-second tasks than the head has CPUs: the rest run on other nodes.
    raylets = phalanx.get([where.remote(1.0) for _ in range(6)], timeout=60)
    assert len(set(raylets)) >= 2, raylets


def test_custom_resource_routes_to_the_node_that_has_it(three_nodes):
    sim_raylet = [p.pid for n, p in three_nodes.procs if n == "raylet"][2]
    got = phalanx.get([where.options(resources={"sim": 1}).remote(0.1) for _ in range(3)], timeout=60)
    assert set(got) == {sim_raylet}


def test_results_of_spilled_tasks_can_be_large_and_feed_other_tasks(three_nodes):
    import numpy as np

    @phalanx.remote(resources={"sim": 1})
    def make():
        return np.arange(1_000_000, dtype=np.int64)  # 8 MB: travels back into the head's store

    @phalanx.remote
    def total(a):
        return int(a.sum())
    arr = make.remote()
    assert phalanx.get(total.remote(arr), timeout=60) == 999999 * 1000000 // 2
    assert phalanx.get(arr, timeout=60)[-1] == 999_999


def test_node_death_retries_its_running_tasks_elsewhere(three_nodes, tmp_path):
    raylets = [p for n, p in three_nodes.procs if n == "raylet"]

    @phalanx.remote(max_retries=2)
    def slow_where(marker):
        open(marker, "w").write(str(os.getppid()))
        time.sleep(3)
        return os.getppid()
    # Keep the head busy so the task spills to another node.
    busy = where.remote(2.5)
    marker = str(tmp_path / "started")
    ref = slow_where.remote(marker)
    deadline = time.monotonic() + 20
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    first = int(open(marker).read())
    victim = next(p for p in raylets if p.pid == first)
    if victim is raylets[0]:
        pytest.skip("the task did not spill (the head ran it); nothing to kill")
    victim.send_signal(signal.SIGKILL)
    again = phalanx.get(ref, timeout=60)
    assert again != first
    phalanx.get(busy)


def test_spread_uses_every_node(three_nodes):
    got = phalanx.get([where.options(scheduling_strategy="SPREAD").remote(0.05) for _ in range(9)], timeout=60)
    assert len(set(got)) == 3, got


def test_node_affinity_runs_there_or_fails_clearly(three_nodes):
    nodes = [n for n in phalanx.nodes() if n["alive"]]
    assert len(nodes) == 3
    target = next(n for n in nodes if n["resources_total"].get("sim"))
    strategy = phalanx.NodeAffinitySchedulingStrategy(target["node_id"])
    got = phalanx.get([where.options(scheduling_strategy=strategy).remote(0.05) for _ in range(3)], timeout=60)
    assert set(got) == {target["pid"]}
    gone = phalanx.NodeAffinitySchedulingStrategy("ab" * 16)
    with pytest.raises(phalanx.InfeasibleError, match="hard node affinity"):
        phalanx.get(where.options(scheduling_strategy=gone).remote(0), timeout=30)
    soft = phalanx.NodeAffinitySchedulingStrategy("ab" * 16, soft=True)
    assert phalanx.get(where.options(scheduling_strategy=soft).remote(0), timeout=30) > 0
    with pytest.raises(ValueError, match="scheduling_strategy"):
        where.options(scheduling_strategy="RANDOM")


@phalanx.remote
class Placed:
    def raylet(self):
        return os.getppid()


def test_actors_take_node_affinity_and_spread_as_tasks_do(three_nodes):
    nodes = [n for n in phalanx.nodes() if n["alive"]]
    head = phalanx.get_node_id()
    target = next(n for n in nodes if n["node_id"] != head)
    there = Placed.options(scheduling_strategy=phalanx.NodeAffinitySchedulingStrategy(target["node_id"])).remote()
    assert phalanx.get(there.raylet.remote(), timeout=60) == target["pid"]
    gone = Placed.options(scheduling_strategy=phalanx.NodeAffinitySchedulingStrategy("ab" * 16)).remote()
    with pytest.raises(phalanx.ActorDiedError, match="hard node affinity"):
        phalanx.get(gone.raylet.remote(), timeout=30)
    soft = Placed.options(scheduling_strategy=phalanx.NodeAffinitySchedulingStrategy("ab" * 16, soft=True)).remote()
    assert phalanx.get(soft.raylet.remote(), timeout=30) > 0
    spread = [Placed.options(scheduling_strategy="SPREAD").remote() for _ in range(3)]
    assert len(set(phalanx.get([a.raylet.remote() for a in spread], timeout=60))) == 3
    for a in [there, soft] + spread:
        phalanx.kill(a)


@pytest.fixture
def sim_nodes():
    """A head without "sim" that the driver uses, and two nodes with {"sim": 1} each."""
    # Small transfer chunks: the objects these tests copy go in many ranges.
    with loopback_nodes([None, {"sim": 1}, {"sim": 1}], ["--transfer-chunk-bytes", "262144"]) as node:
        yield node


@phalanx.remote(resources={"sim": 1}, max_restarts=1, max_task_retries=1)
class Sim:
    def __init__(self):
        self.steps = 0

    def pid(self):
        return os.getpid()

    def step(self, k=1):
        self.steps += k
        return self.steps

    def host(self):
        return os.getppid()


def test_actor_placed_on_the_node_with_its_resource(sim_nodes):
    raylets = [p.pid for n, p in sim_nodes.procs if n == "raylet"]
    s = Sim.remote()
    assert phalanx.get([s.step.remote() for _ in range(50)], timeout=60)[-1] == 50
    assert phalanx.get(s.host.remote(), timeout=60) in raylets[1:]
    # From another node, calls go straight to the actor's worker over TCP
    # (once the calls sent through the raylet before it was placed are done).
    from phalanx import _core
    steps = 50
    for _ in range(100):
        sent = _core.direct_calls_sent()
        steps += 1
        assert phalanx.get(s.step.remote(), timeout=60) == steps
        if _core.direct_calls_sent() > sent:
            break
        time.sleep(0.005)
    sent = _core.direct_calls_sent()
    assert phalanx.get([s.step.remote() for _ in range(20)], timeout=60)[-1] == steps + 20
    assert _core.direct_calls_sent() - sent == 20
    b = Sim.remote()  # the second sim node
    assert {phalanx.get(s.host.remote()), phalanx.get(b.host.remote(), timeout=60)} == set(raylets[1:])
    phalanx.kill(s)  # its node kills it; later calls fail there
    with pytest.raises(phalanx.ActorDiedError, match="killed"):
        phalanx.get(s.step.remote(), timeout=30)


def test_actor_restarted_on_another_node_when_its_node_dies(sim_nodes):
    procs = {p.pid: p for n, p in sim_nodes.procs if n == "raylet"}
    s = Sim.remote()
    assert phalanx.get(s.step.remote(5), timeout=60) == 5
    first_host = phalanx.get(s.host.remote(), timeout=60)
    worker = phalanx.get(s.pid.remote(), timeout=60)
    procs[first_host].send_signal(signal.SIGKILL)
    procs[first_host].wait()
    t = time.monotonic()
    # Its worker dies with it a moment later (a call that reaches it before
    # that may still be answered by it).
    while time.monotonic() - t < 10:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    # Restarted elsewhere: the constructor ran again (state starts over).
    assert phalanx.get(s.step.remote(1), timeout=60) == 1
    assert time.monotonic() - t < 30
    second_host = phalanx.get(s.host.remote(), timeout=60)
    assert second_host != first_host and second_host in procs


def test_actor_called_from_a_task_on_another_node(three_nodes):
    @phalanx.remote
    class Tally:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

    tally = Tally.options(name="tally").remote()
    assert phalanx.get(tally.add.remote(1)) == 1

    @phalanx.remote(resources={"sim": 1})  # only the third node has "sim"
    def remote_caller(handle, k):
        by_name = phalanx.get_actor("tally")
        return phalanx.get(handle.add.remote(k)), phalanx.get(by_name.add.remote(k)), os.getppid()
    a, b, raylet = phalanx.get(remote_caller.remote(tally, 10), timeout=60)
    assert (a, b) == (11, 21)
    assert raylet == [p.pid for n, p in three_nodes.procs if n == "raylet"][2]
    assert phalanx.get(tally.add.remote(0)) == 21

    @phalanx.remote(resources={"sim": 1})
    def remote_killer():
        phalanx.kill(phalanx.get_actor("tally"))
    phalanx.get(remote_killer.remote(), timeout=60)
    with pytest.raises(phalanx.ActorDiedError, match="killed"):
        phalanx.get(tally.add.remote(1), timeout=30)


def test_actors_share_the_fate_of_the_node_that_created_them(sim_nodes):
    # A fourth node, the only one with "maker": a task there creates two actors
    # that need "sim", so they are placed on the sim nodes.
    fast = ["--heartbeat-ms", "200", "--node-dead-after-ms", "1500"]
    sim_nodes.start_raylet(sim_nodes.redis_address, num_cpus=1, extra_args=fast + ["--resources", '{"maker": 1}'])
    maker = sim_nodes.procs[-1][1]
    api._wait_for_nodes(4, sim_nodes.session_dir)  # every raylet sees the maker's node

    # An actor on that node creates them and keeps their handles (a task's would
    # go when it returns, and the owned actor with them: out of scope).
    @phalanx.remote(resources={"maker": 1})
    class Maker:
        def make(self):
            self.owned = Sim.options(name="owned").remote()
            self.kept = Sim.options(name="kept", lifetime="detached").remote()
            phalanx.get([self.owned.step.remote(), self.kept.step.remote()], timeout=60)
            return os.getppid()
    m = Maker.remote()
    assert phalanx.get(m.make.remote(), timeout=60) == maker.pid
    owned, kept = phalanx.get_actor("owned"), phalanx.get_actor("kept")
    assert phalanx.get(owned.step.remote(), timeout=30) == 2
    maker.send_signal(signal.SIGKILL)
    # Once the maker node is declared dead, the actor it owned dies with it;
    # the detached one lives on, adopted by the node that hosts it.
    deadline = time.monotonic() + 30
    while True:
        try:
            phalanx.get(owned.step.remote(), timeout=30)
        except phalanx.ActorDiedError as e:
            assert "the node that created it died" in str(e)
            break
        assert time.monotonic() < deadline, "the owned actor outlived the node that created it"
        time.sleep(0.2)
    assert phalanx.get(kept.step.remote(), timeout=30) == 2
    # Its host dies too: nobody owns it now, so a live node restarts it
    # (max_restarts=1), from the creation spec kept in the GCS.
    raylets = {p.pid: p for n, p in sim_nodes.procs if n == "raylet"}
    host = phalanx.get(kept.host.remote(), timeout=30)
    raylets[host].send_signal(signal.SIGKILL)
    raylets[host].wait()
    deadline = time.monotonic() + 30
    last = None
    while True:
        try:
            last = phalanx.get(kept.step.remote(), timeout=30)
            if last == 1:  # a fresh instance
                break
        except phalanx.ActorDiedError as e:
            last = e  # the call reached it while it was going
        assert time.monotonic() < deadline, (f"the detached actor was not restarted within 30 s; the last call gave "
                                             f"{last!r}; nodes: {[(n['node_id'][:12], n['alive'], n['resources_available']) for n in phalanx.nodes()]}")
        time.sleep(0.2)
    assert phalanx.get(kept.host.remote(), timeout=30) not in (host, maker.pid)


@phalanx.remote(resources={"sim": 1})
class Summer:
    def total(self, a):
        return float(np.sum(a))

    def host(self):
        return os.getppid()


def test_store_sized_arguments_follow_tasks_and_actors_to_other_nodes(sim_nodes):
    sims = [p.pid for n, p in sim_nodes.procs if n == "raylet"][1:]
    arr = np.arange(3_000_000, dtype=np.float64)  # 24 MB: copied in several chunks
    ref = phalanx.put(arr)

    @phalanx.remote(resources={"sim": 1})  # runs only on a sim node, not the driver's
    def where_and_sum(a):
        return os.getppid(), float(a.sum())
    host, total = phalanx.get(where_and_sum.remote(ref), timeout=60)
    assert host in sims and total == float(arr.sum())

    s = Summer.remote()
    assert phalanx.get(s.host.remote(), timeout=60) in sims
    # A store object, a small value and a result still being computed, all by ref.
    assert phalanx.get(s.total.remote(ref), timeout=60) == float(arr.sum())
    assert phalanx.get(s.total.remote(phalanx.put(np.ones(10))), timeout=60) == 10.0

    @phalanx.remote
    def slow_array():
        time.sleep(0.5)
        return np.ones(1_000_000)
    assert phalanx.get(s.total.remote(slow_array.remote()), timeout=60) == 1_000_000.0
    del ref


def test_an_object_copied_again_after_its_copy_was_freed(sim_nodes):
    ref = phalanx.put(np.arange(500_000, dtype=np.float64))

    @phalanx.remote(resources={"sim": 1})
    def total(a):
        return float(a.sum())
    # Each run copies the object to a sim node and frees the copy after: the
    # next copy to the same node must not be mistaken for one still there.
    for _ in range(4):
        assert phalanx.get(total.remote(ref), timeout=60) == float(np.arange(500_000).sum())


def test_many_readers_of_one_object_and_the_directory_cleans_up(sim_nodes):
    from phalanx import _core
    host, port = sim_nodes.redis_address.split(":")
    arr = np.arange(4_000_000, dtype=np.float64)  # 32 MB
    ref = phalanx.put(arr)
    key = "objdir:" + ref.binary().hex()

    @phalanx.remote(resources={"sim": 0.5})
    def reader(a, pause):
        time.sleep(pause)
        return os.getppid(), float(a[-1]), float(a.sum())
    # Four readers on the two sim nodes at once: each node copies the object
    # once (from the driver's node or from the other sim node, even while that
    # one is still receiving it) and every reader sees the whole array.
    out = phalanx.get([reader.remote(ref, 0.3) for _ in range(4)], timeout=120)
    sims = {p.pid for n, p in sim_nodes.procs if n == "raylet"} - {sim_nodes.procs[1][1].pid}
    assert {o[0] for o in out} == sims
    assert all(o[1] == 3_999_999.0 and o[2] == float(arr.sum()) for o in out)
    # The copies were freed with their tasks: only the owner's location is left.
    def locations():
        raw = _core.redis_command(host, int(port), ["HKEYS", key], 2.0)
        return {k.decode() for k in raw if k != b"size" and not k.startswith((b"srv:", b"cmp:"))}
    deadline = time.monotonic() + 10
    while len(locations()) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(locations()) == 1
    del ref
    deadline = time.monotonic() + 10
    while _core.redis_command(host, int(port), ["EXISTS", key], 2.0) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _core.redis_command(host, int(port), ["EXISTS", key], 2.0) == 0


def test_large_actor_results_are_copied_from_the_actor_node_and_reduced(sim_nodes):
    """Store-sized results of actors on other nodes stay in their node's store
    until the caller's raylet has copied them in ranges; then that node lets
    go. A reduce over them is right, and nothing is left behind."""
    from phalanx import _core
    host, port = sim_nodes.redis_address.split(":")

    @phalanx.remote(resources={"sim": 0.5})
    class Grad:
        def __init__(self, k):
            self.g = np.full(1_000_000, k, np.float32)  # 4 MB

        def grad(self):
            return self.g

    actors = [Grad.remote(k) for k in (1, 2, 3, 4)]
    for _ in range(3):
        refs = [a.grad.remote() for a in actors]
        total = phalanx.collective.reduce(refs, op="sum", timeout=60)
        out = phalanx.get(total, timeout=60)
        assert out.shape == (1_000_000,) and out[0] == 10 and out[-1] == 10
        assert [float(phalanx.get(r, timeout=30)[7]) for r in refs] == [1, 2, 3, 4]
        keys = ["objdir:" + r.binary().hex() for r in refs + [total]]
        del refs, total, out
        # Every copy is freed everywhere: the directory holds none of them.
        deadline = time.monotonic() + 10
        while any(_core.redis_command(host, int(port), ["EXISTS", k], 2.0) for k in keys):
            left = {k: _core.redis_command(host, int(port), ["HGETALL", k], 2.0) for k in keys
                    if _core.redis_command(host, int(port), ["EXISTS", k], 2.0)}
            assert time.monotonic() < deadline, f"directory entries left behind: {left}"
            time.sleep(0.1)


def test_actor_names_are_unique_across_nodes(three_nodes):
    # Two processes on different nodes create the same name at the same
    # moment: with get_if_exists both end with one actor; without it, one
    # creation fails naming the other.
    @phalanx.remote
    class Named:
        def whoami(self):
            return phalanx.get_runtime_context().get_actor_id()

    @phalanx.remote
    def make(name, at, if_exists):
        time.sleep(max(0.0, at - time.time()))
        try:  # the loser's .remote() is refused at once with Ray's ValueError, never a handle that fails later
            h = Named.options(name=name, lifetime="detached", get_if_exists=if_exists).remote()
        except ValueError as e:
            return str(e)
        return phalanx.get(h.whoami.remote(), timeout=30)

    far = make.options(resources={"sim": 1})
    for k in range(6):
        at = time.time() + 1.0  # both tasks are running by then
        got = phalanx.get([make.remote(f"shared-{k}", at, True), far.remote(f"shared-{k}", at, True)], timeout=60)
        assert got[0] == got[1], got
        phalanx.kill(phalanx.get_actor(f"shared-{k}"))
    at = time.time() + 1.0
    got = phalanx.get([make.remote("only-one", at, False), far.remote("only-one", at, False)], timeout=60)
    refused = [g for g in got if "already taken" in g or "already exists" in g]
    assert len(refused) == 1 and len(set(got)) == 2, got
    phalanx.kill(phalanx.get_actor("only-one"))
