"""Static collective groups across nodes (python/phalanx/_private/
collective_group.py): ranks on raylets on loopback meet once through the
GCS, then every call goes rank to rank on the connections opened then (no
raylet on its path); every op at sizes 0, 1, 1 KiB - 1 and 64 MiB + 3
elements with 1 to 5 ranks, on one node and across nodes; a mismatch raises
an error naming both sides on every rank; a rank whose node dies or whose
process exits fails the others' call instead of hanging it, and the
survivors form the group again."""
import os
import signal
import time

import numpy as np
import pytest

import phalanx
from test_reduce_chain import N, four_nodes  # noqa: F401 (a fixture)


@phalanx.remote
class Rank:
    def __init__(self, world, rank, group):
        self.rank, self.group = rank, group
        phalanx.collective.init_group(world, rank, group, timeout=60)

    def host(self):
        return os.getppid()

    def pid(self):
        return os.getpid()

    def shared_memory_links(self):
        from phalanx._private import collective_group
        return collective_group._groups[self.group].channel.shared_memory_links

    def sliced(self):
        """How many allreduces this node's raylet ran as a ring."""
        return phalanx.cluster_stats()["allreduce_sliced"]

    def everything(self):
        r, g = self.rank, self.group
        a = np.full(N, r + 1, np.float32)  # 4 MB: well above a slice per rank
        phalanx.collective.allreduce(a, op="sum", group_name=g, timeout=60)
        b = np.arange(N, dtype=np.float64) if r == 2 else np.zeros(N, np.float64)
        phalanx.collective.broadcast(b, src_rank=2, group_name=g, timeout=60)
        gathered = [np.zeros(1000, np.int32) for _ in range(4)]
        phalanx.collective.allgather(gathered, np.full(1000, r * 10, np.int32), group_name=g, timeout=60)
        part = np.zeros(N // 4, np.float32)
        phalanx.collective.reducescatter(part, [np.full(N // 4, r + k, np.float32) for k in range(4)], op="max",
                                         group_name=g, timeout=60)
        small = np.array([r], np.int64)
        phalanx.collective.allreduce(small, op="prod", group_name=g, timeout=60)
        phalanx.collective.barrier(group_name=g, timeout=60)
        return (float(a.min()), float(a.max()), bool((b == np.arange(N)).all()), [int(x[0]) for x in gathered],
                float(part.min()), float(part.max()), int(small[0] + 0))

    def barrier(self):
        try:
            phalanx.collective.barrier(group_name=self.group, timeout=60)
            return "passed"
        except Exception as e:
            return f"{type(e).__name__}: {e}"

    def rejoin(self, world, rank, group):
        phalanx.collective.init_group(world, rank, group, timeout=60)
        self.group = group

    def allreduce(self, shape, timeout=60):
        try:
            a = np.ones(shape, np.float32)
            phalanx.collective.allreduce(a, group_name=self.group, timeout=timeout)
            return float(a[0])
        except Exception as e:
            return f"{type(e).__name__}: {e}"


def ranks_on(nodes, group):
    return [Rank.options(resources={f"n{k}": 1}).remote(len(nodes), r, group) for r, k in enumerate(nodes)]


def test_a_group_on_four_nodes_moves_its_arrays_rank_to_rank(four_nodes):
    ranks = ranks_on([1, 2, 3, 0], "four")
    assert len(set(phalanx.get([r.host.remote() for r in ranks], timeout=60))) == 4
    before = phalanx.get(ranks[0].sliced.remote(), timeout=60)
    out = phalanx.get([r.everything.remote() for r in ranks], timeout=180)
    for rank, (lo, hi, same, gathered, pmin, pmax, prod) in enumerate(out):
        assert (lo, hi) == (10.0, 10.0)  # 1 + 2 + 3 + 4
        assert same
        assert gathered == [0, 10, 20, 30]
        assert (pmin, pmax) == (3.0 + rank, 3.0 + rank)  # max over r of r + rank
        assert prod == 0
    # No raylet ran a ring for them: the ranks did, on their own connections.
    assert phalanx.get(ranks[0].sliced.remote(), timeout=60) == before


def test_mismatched_arrays_raise_an_error_naming_both_on_every_rank(four_nodes):
    ranks = ranks_on([1, 2, 3], "mismatch")
    outs = phalanx.get([r.allreduce.remote(s) for r, s in zip(ranks, [(8,), (8,), (9,)])], timeout=60)
    for o in outs:
        assert o.startswith("CollectiveError: group 'mismatch' allreduce (call 1): "), o
        assert "rank 2 (pid " in o and "called allreduce op=sum float32 (9,)" in o, o
        assert "allreduce op=sum float32 (8,)" in o and "every rank must make the same calls" in o, o
    # The group goes on: the next call works.
    assert phalanx.get([r.allreduce.remote((8,)) for r in ranks], timeout=60) == [3.0] * 3
    # A rank in a barrier while the others allreduce: all three hear of it.
    outs = phalanx.get([ranks[0].barrier.remote()] + [r.allreduce.remote((8,)) for r in ranks[1:]], timeout=60)
    for o in outs:
        assert o.startswith(("CollectiveError: group 'mismatch' barrier (call 3): ",
                             "CollectiveError: group 'mismatch' allreduce (call 3): ")), o
        assert "called barrier" in o and "called allreduce" in o, o


def test_a_rank_whose_node_dies_fails_the_call_instead_of_hanging_it(four_nodes):
    ranks = ranks_on([1, 2, 3], "dies")
    pids = phalanx.get([r.pid.remote() for r in ranks], timeout=60)
    # Ranks 0 and 1 call, without a timeout; rank 2's node dies before it does.
    calls = [r.allreduce.remote((N,), None) for r in ranks[:2]]
    time.sleep(0.5)
    raylets = [p for n, p in four_nodes.procs if n == "raylet"]
    raylets[3].send_signal(signal.SIGKILL)
    raylets[3].wait()
    start = time.monotonic()
    for o in phalanx.get(calls, timeout=60):
        assert o.startswith("CollectiveError: group 'dies' allreduce (call 1): "), o
        assert f"rank 2 (pid {pids[2]} on node " in o and "is gone" in o, o
    assert time.monotonic() - start < 20


@pytest.mark.parametrize("one_node", [False, True])
def test_a_rank_whose_process_exits_fails_the_call_and_every_later_one(four_nodes, one_node):
    # Across nodes the ranks talk over TCP; on one node through shared-memory pipes, whose
    # Unix socket closing is how the others learn the rank is gone.
    if one_node:
        ranks = [Rank.options(resources={"n0": 0.5}).remote(3, r, "exits") for r in range(3)]
    else:
        ranks = ranks_on([1, 2, 3], "exits")
    assert phalanx.get([r.shared_memory_links.remote() for r in ranks], timeout=60) == [2 if one_node else 0] * 3
    pids = phalanx.get([r.pid.remote() for r in ranks], timeout=60)
    calls = [r.allreduce.remote((N,), None) for r in ranks[:2]]  # no timeout
    time.sleep(0.5)
    os.kill(pids[2], signal.SIGKILL)
    start = time.monotonic()
    gone = f"rank 2 (pid {pids[2]} on node "
    for o in phalanx.get(calls, timeout=60):
        assert o.startswith("CollectiveError: group 'exits' allreduce (call 1): "), o
        assert gone in o and "is gone: its connection closed" in o, o
    assert time.monotonic() - start < 20
    # The group's later calls fail at once too, on the ranks that are left.
    for o in phalanx.get([r.barrier.remote() for r in ranks[:2]], timeout=60):
        assert o.startswith("CollectiveError: group 'exits' barrier (call 2): ") and gone in o, o
    # The survivors form a group again, and it works.
    phalanx.get([r.rejoin.remote(2, k, "exits-again") for k, r in enumerate(ranks[:2])], timeout=60)
    assert phalanx.get([r.allreduce.remote((5,)) for r in ranks[:2]], timeout=60) == [2.0, 2.0]


@phalanx.remote
class Sizes:
    """A rank that runs every op at every size and says what it got."""

    def __init__(self, world, rank, group):
        self.world, self.rank, self.group = world, rank, group
        phalanx.collective.init_group(world, rank, group, timeout=60)

    def run(self, counts):
        w, r, g = self.world, self.rank, self.group
        out = []
        for n in counts:
            a = (np.arange(n, dtype=np.float32) % 7) * (r + 1)
            phalanx.collective.allreduce(a, group_name=g, timeout=120)
            want = (np.arange(n, dtype=np.float32) % 7) * (w * (w + 1) / 2)
            b = np.arange(n, dtype=np.int32) if r == w - 1 else np.zeros(n, np.int32)
            phalanx.collective.broadcast(b, src_rank=w - 1, group_name=g, timeout=120)
            gathered = [np.zeros(n, np.int8) for _ in range(w)]
            phalanx.collective.allgather(gathered, np.full(n, r, np.int8), group_name=g, timeout=120)
            part = np.zeros(len(np.array_split(np.arange(n * w), w)[r]), np.float64)
            phalanx.collective.reducescatter(part, [np.full(n, r + k, np.float64) for k in range(w)], op="min",
                                             group_name=g, timeout=120)
            parts_ok = bool((part == np.array_split(np.repeat(np.arange(w, dtype=np.float64), n), w)[r]).all())
            out.append((n, bool(np.array_equal(a, want)), bool((b == np.arange(n)).all()),
                        all(bool((x == k).all()) for k, x in enumerate(gathered)), parts_ok))
        phalanx.collective.barrier(group_name=g, timeout=60)
        return out


@pytest.mark.parametrize("world,spread", [(1, False), (2, True), (3, False), (4, True), (5, True)])
def test_every_op_at_every_size_on_one_node_and_across_nodes(four_nodes, world, spread):
    counts = [0, 1, 1023, (64 << 20) // 4 + 3] if world in (2, 5) else [0, 1, 1023]  # (64 MiB + 3 elements)
    nodes = [k % 4 for k in range(world)] if spread else [0] * world
    group = f"sizes-{world}-{spread}"
    ranks = [Sizes.options(resources={f"n{k}": 0.2}).remote(world, r, group) for r, k in enumerate(nodes)]
    for out in phalanx.get([r.run.remote(counts) for r in ranks], timeout=300):
        for n, *ok in out:
            assert all(ok), (world, spread, n, ok)
    for r in ranks:
        phalanx.kill(r)


def test_rays_remaining_collective_names_reduce_to_one_rank_and_name_the_backends(cluster):
    import numpy as np
    from phalanx.util import collective as col

    @phalanx.remote(num_cpus=0)
    class Rank:
        def __init__(self, rank):
            col.init_collective_group(2, rank, backend=col.Backend("gloo"), group_name="rr")
            self.rank = rank

        def reduce_to_one(self):
            x = np.full(4, self.rank + 1.0)
            col.reduce(x, dst_rank=1, group_name="rr")
            col.synchronize()
            return x.tolist(), col.get_group_handle("rr") is not None, col.gloo_available()

    ranks = [Rank.remote(r) for r in range(2)]
    got = phalanx.get([r.reduce_to_one.remote() for r in ranks], timeout=60)
    assert got[0] == ([1.0] * 4, True, True)  # rank 0 keeps its own
    assert got[1] == ([3.0] * 4, True, True)  # rank 1 has the sum
    with pytest.raises(ValueError, match="Unrecognized backend"):
        col.Backend("carrier-pigeon")
    with pytest.raises(ValueError, match="no collective group"):
        col.get_group_handle("nope")
    import torch
    if not torch.cuda.is_available():
        assert col.nccl_available() is False
