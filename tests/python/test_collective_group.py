"""Static collective groups across nodes (python/phalanx/_private/
collective_group.py): four ranks on four raylets on loopback meet through
the GCS and move their arrays over the object layer: the allreduce is the
raylets' ring, made on each rank's node; a mismatch raises the same error on
every rank; a rank whose node dies or whose process exits fails the others'
call instead of hanging it."""
import os
import signal
import time

import numpy as np

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

    def allreduce(self, shape, timeout=60):
        try:
            a = np.ones(shape, np.float32)
            phalanx.collective.allreduce(a, group_name=self.group, timeout=timeout)
            return float(a[0])
        except Exception as e:
            return f"{type(e).__name__}: {e}"


def ranks_on(nodes, group):
    return [Rank.options(resources={f"n{k}": 1}).remote(len(nodes), r, group) for r, k in enumerate(nodes)]


def test_a_group_on_four_nodes_moves_its_arrays_over_the_object_layer(four_nodes):
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
    # The three allreduces (reducescatter is one) ran as rings led by rank 0's raylet.
    assert phalanx.get(ranks[0].sliced.remote(), timeout=60) == before + 3


def test_mismatched_arrays_raise_the_same_error_on_every_rank(four_nodes):
    ranks = ranks_on([1, 2, 3], "mismatch")
    outs = phalanx.get([r.allreduce.remote(s) for r, s in zip(ranks, [(8,), (8,), (9,)])], timeout=60)
    for o in outs:
        assert o.startswith("CollectiveError: group 'mismatch' allreduce (call 1): rank 2 has shape (9,) but rank 0 "
                            "has (8,)"), o
    # The group goes on: the next call works.
    assert phalanx.get([r.allreduce.remote((8,)) for r in ranks], timeout=60) == [3.0] * 3
    # A rank in a barrier while the others allreduce: all three hear of it.
    outs = phalanx.get([ranks[0].barrier.remote()] + [r.allreduce.remote((8,)) for r in ranks[1:]], timeout=60)
    for o in outs:
        assert o.startswith("CollectiveError: group 'mismatch' barrier (call 3): rank 1 has kind 'allreduce' but "
                            "rank 0 has 'barrier'") or o.startswith("CollectiveError: group 'mismatch' allreduce "
                                                                    "(call 3): rank 1 has kind 'allreduce' but rank 0 "
                                                                    "has 'barrier'"), o


def test_a_rank_whose_node_dies_fails_the_call_instead_of_hanging_it(four_nodes):
    ranks = ranks_on([1, 2, 3], "dies")
    phalanx.get([r.host.remote() for r in ranks], timeout=60)
    # Ranks 0 and 1 call, without a timeout; rank 2's node dies before it does.
    calls = [r.allreduce.remote((N,), None) for r in ranks[:2]]
    time.sleep(0.5)
    raylets = [p for n, p in four_nodes.procs if n == "raylet"]
    raylets[3].send_signal(signal.SIGKILL)
    raylets[3].wait()
    start = time.monotonic()
    for o in phalanx.get(calls, timeout=60):
        assert o.startswith("CollectiveError: group 'dies' allreduce (call 1): the node of rank 2 "), o
        assert o.endswith(" died"), o
    assert time.monotonic() - start < 20


def test_a_rank_whose_process_exits_fails_the_call_and_every_later_one(four_nodes):
    ranks = ranks_on([1, 2, 3], "exits")
    pids = phalanx.get([r.pid.remote() for r in ranks], timeout=60)
    calls = [r.allreduce.remote((N,), None) for r in ranks[:2]]  # no timeout
    time.sleep(0.5)
    os.kill(pids[2], signal.SIGKILL)
    start = time.monotonic()
    gone = f"rank 2 is gone: worker process {pids[2]} on node "
    for o in phalanx.get(calls, timeout=60):
        assert o.startswith(f"CollectiveError: group 'exits' allreduce (call 1): {gone}"), o
    assert time.monotonic() - start < 20
    # The group's later calls fail at once too (the GCS remembers), on the ranks that are left.
    for o in phalanx.get([r.barrier.remote() for r in ranks[:2]], timeout=60):
        assert o.startswith(f"CollectiveError: group 'exits' barrier (call 2): {gone}"), o
