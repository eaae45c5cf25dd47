"""Kills mid-collective (docs/fault-tolerance.md): a raylet killed with
SIGKILL in the middle of a reduce, a broadcast and an allreduce. Each ends
with the right values or with a named error, within a deadline, and the
cluster goes on."""
import os
import signal
import time

import numpy as np
import pytest

import phalanx

from .util import loopback_nodes


@pytest.fixture
def sim_nodes():
    """A head without "sim" that the driver uses, and three nodes with {"sim": 1} each."""
    # Small transfer chunks: the objects these tests copy go in many ranges.
    with loopback_nodes([None, {"sim": 1}, {"sim": 1}, {"sim": 1}], ["--transfer-chunk-bytes", "262144"]) as node:
        yield node


@phalanx.remote(resources={"sim": 0.5})
class SlowGrad:
    def __init__(self, k):
        self.k = k

    def host(self):
        return os.getppid()

    def grad(self, delay):
        time.sleep(delay)
        return np.full(300_000, self.k, np.float32)  # store-sized


def test_reduce_survives_a_raylet_killed_mid_reduce_with_a_spare(sim_nodes):
    """Inputs come from actors on the two sim nodes; one node's raylet is
    killed while its input is still being computed. With a spare input the
    reduce completes with the right sum; without one it fails at once with
    an error naming the lost input. Neither hangs."""
    raylets = {p.pid: p for n, p in sim_nodes.procs if n == "raylet"}
    actors = [SlowGrad.remote(k) for k in (1, 2, 3, 4)]
    hosts = phalanx.get([a.host.remote() for a in actors], timeout=60)
    assert len(set(hosts)) >= 2, "the actors are spread over the sim nodes"
    victim = hosts[0]
    doomed = [i for i, h in enumerate(hosts) if h == victim]
    alive = [i for i, h in enumerate(hosts) if h != victim]
    refs = [a.grad.remote(3.0 if i in doomed else 0.2) for i, a in enumerate(actors)]
    spare = phalanx.collective.reduce(refs, op="sum", num_objects=len(alive), timeout=60)
    strict = phalanx.collective.reduce(refs, op="sum", timeout=60)
    time.sleep(0.5)
    raylets[victim].send_signal(signal.SIGKILL)
    raylets[victim].wait()
    start = time.monotonic()
    out = phalanx.get(spare, timeout=60)
    assert out[0] == sum(k + 1 for k in alive)
    assert sorted(refs.index(r) for r in phalanx.collective.reduced_inputs(spare)) == alive
    # The first lost input to be noticed is named (either of the killed node's).
    named = "|".join(r"input %d \(ObjectRef\(%s\)\)" % (i, refs[i].hex()) for i in doomed)
    with pytest.raises(phalanx.CollectiveError, match=r"needs 4 of its 4 inputs, but 1 failed: (%s): .*dead" % named):
        phalanx.get(strict, timeout=60)
    assert time.monotonic() - start < 30


def test_broadcast_survives_a_raylet_killed_mid_copy(sim_nodes):
    """Readers on both sim nodes copy one 96 MB object at once (the second
    may read from the first while that one is still receiving it); the first
    sim node's raylet is killed during the copy. The other reader goes on from
    another copy, the killed node's reader is retried on the surviving node;
    both see the whole array, and nothing hangs."""
    raylets = [p for n, p in sim_nodes.procs if n == "raylet"][1:]
    arr = np.arange(12_000_000, dtype=np.float64)
    ref = phalanx.put(arr)

    @phalanx.remote(resources={"sim": 1}, max_retries=2)
    def reader(a):
        return os.getppid(), float(a[-1]), float(a[::1000].sum())

    start = time.monotonic()
    refs = [reader.remote(ref) for _ in range(2)]
    time.sleep(0.05)
    raylets[0].send_signal(signal.SIGKILL)
    raylets[0].wait()
    out = phalanx.get(refs, timeout=90)
    assert all(o[1] == 11_999_999.0 and o[2] == float(arr[::1000].sum()) for o in out)
    assert time.monotonic() - start < 60


def test_a_node_killed_mid_allreduce_fails_every_result_without_hanging(sim_nodes):
    """Four inputs from actors on the three sim nodes; while the allreduce
    waits for a slow one, the node of another (its input made, its slices
    under way) is killed. Every result fails, none hangs, and an allreduce
    over the actors left works."""
    raylets = {p.pid: p for n, p in sim_nodes.procs if n == "raylet"}
    actors = [SlowGrad.remote(k) for k in (1, 2, 3, 4)]
    hosts = phalanx.get([a.host.remote() for a in actors], timeout=60)
    assert len(set(hosts)) >= 2, "the actors are spread over the sim nodes"
    victim = hosts[0]
    slow = next(i for i, h in enumerate(hosts) if h != victim)
    refs = [a.grad.remote(1.5 if i == slow else 0.1) for i, a in enumerate(actors)]
    outs = phalanx.collective.allreduce(refs, timeout=60)
    time.sleep(0.8)
    raylets[victim].send_signal(signal.SIGKILL)
    raylets[victim].wait()
    start = time.monotonic()
    for o in outs:
        with pytest.raises(phalanx.CollectiveError, match="allreduce failed"):
            phalanx.get(o, timeout=60)
    assert time.monotonic() - start < 30
    # The cluster goes on: an allreduce over the actors left works.
    left = [(a, k) for a, h, k in zip(actors, hosts, (1, 2, 3, 4)) if h != victim]
    outs = phalanx.collective.allreduce([a.grad.remote(0.0) for a, _ in left], timeout=60)
    assert [float(v[7]) for v in phalanx.get(outs, timeout=60)] == [float(sum(k for _, k in left))] * len(left)
