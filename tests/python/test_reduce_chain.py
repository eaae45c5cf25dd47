"""Reduce chains across nodes (collectives/reduce_manager.h): large inputs stay
on the nodes that made them, each node adds its input to the partial result
streaming past it, and the caller's node copies the last link. These tests
run four raylets on loopback and check the result, which inputs went in, that
the inputs were not copied to the caller's node, what a mismatch or a dead
node does, and that nothing is left behind."""
import signal
import time

import numpy as np
import pytest

import phalanx
from conftest import loopback_nodes, wait_until

N = 1_000_000  # float32 elements: 4 MB, a store object well above the chain's threshold


@pytest.fixture
def four_nodes():
    """The driver's node (resource n0, room for two actors) and three more (n1, n2, n3)."""
    resources = [{f"n{k}": 2 if k == 0 else 1} for k in range(4)]
    with loopback_nodes(resources, ["--transfer-chunk-bytes", "262144"]) as node:
        yield node


@phalanx.remote
class Grad:
    def __init__(self, k):
        self.k = k

    def host(self):
        import os
        return os.getppid()

    def grad(self, delay=0.0, shape=(N,), dtype="float32"):
        time.sleep(delay)
        return np.full(shape, self.k + 1, dtype)

    def total(self, array):
        return float(array.sum(dtype=np.float64))


def actors_on(nodes):
    return [Grad.options(resources={f"n{k}": 1}).remote(k) for k in nodes]


def directory_keys(node):
    from phalanx import _core
    host, port = node.redis_address.split(":")
    return set(_core.redis_command(host, int(port), ["KEYS", "objdir:*"], 2.0))


def test_large_inputs_are_reduced_along_a_chain_of_their_nodes(four_nodes):
    actors = actors_on([1, 2, 3])
    phalanx.get([a.host.remote() for a in actors], timeout=60)
    before = phalanx.cluster_stats()
    keys_before = directory_keys(four_nodes)
    refs = [a.grad.remote() for a in actors]
    total = phalanx.collective.reduce(refs, op="sum", timeout=60)
    out = phalanx.get(total, timeout=60)
    assert out.shape == (N,) and out.dtype == np.float32 and out[0] == 9 and out[-1] == 9
    assert set(phalanx.collective.reduced_inputs(total)) == set(refs)
    after = phalanx.cluster_stats()
    assert after["reduce_chains"] == before["reduce_chains"] + 1
    assert after["reduce_fallbacks"] == before["reduce_fallbacks"]
    # The inputs stayed where they were made: this node's store holds the
    # result only (the last partial result, copied into it, is freed).
    assert after["store_objects"] == before["store_objects"] + 1
    # They are still there for anyone who asks.
    assert [float(phalanx.get(r, timeout=30)[5]) for r in refs] == [2, 3, 4]

    # The first two to arrive, by max: which went in is what reduced_inputs says.
    refs2 = [a.grad.remote(0.4 * (i > 1)) for i, a in enumerate(actors + actors_on([0]))]
    two = phalanx.collective.reduce(refs2, op="max", num_objects=2, timeout=60)
    used = phalanx.collective.reduced_inputs(two, timeout=60)
    assert set(used) == set(refs2[:2])
    assert float(phalanx.get(two, timeout=60)[0]) == 3

    del refs, refs2, total, two, out, used
    # Every partial result, copy and input is freed on every node.
    wait_until(lambda: directory_keys(four_nodes) == keys_before, timeout=10.0,
               what="the directory to forget them all")
    wait_until(lambda: phalanx.cluster_stats()["reduce_steps"] == 0, timeout=10.0, what="the steps to be dropped")


def test_an_input_on_the_callers_node_goes_last_but_counts_in_arrival_order(four_nodes):
    """The caller's node's input is ready first; its link is placed last (the
    result is made where it is), yet with num_objects=2 it is one of the two
    that go in, as the first to arrive."""
    actors = actors_on([0, 1, 2, 3])
    phalanx.get([a.host.remote() for a in actors], timeout=60)
    before = phalanx.cluster_stats()
    refs = [a.grad.remote(d) for a, d in zip(actors, [0.0, 0.3, 0.8, 0.8])]
    two = phalanx.collective.reduce(refs, op="sum", num_objects=2, timeout=60)
    assert set(phalanx.collective.reduced_inputs(two, timeout=60)) == {refs[0], refs[1]}
    assert float(phalanx.get(two, timeout=60)[-1]) == 1 + 2
    everything = phalanx.collective.reduce(refs, op="sum", timeout=60)
    assert float(phalanx.get(everything, timeout=60)[0]) == 1 + 2 + 3 + 4
    assert phalanx.collective.reduced_inputs(everything, timeout=60)[-1] == refs[0]
    after = phalanx.cluster_stats()
    assert after["reduce_chains"] == before["reduce_chains"] + 2
    assert after["reduce_fallbacks"] == before["reduce_fallbacks"]


@phalanx.remote
def _made(k, delay):
    time.sleep(delay)
    return np.full(N, k + 1, np.float32)


def test_an_input_whose_node_let_go_of_it_is_read_where_it_is_now(four_nodes):
    """A task run on another node has its result copied back to the caller's
    node, which then lets the other node drop its copy. Input 0 is located
    on n1 first (the chain's start), input 2 a second later on n1 too: the
    chain reads input 0 where it is by then, the caller's node. (It used to
    place the link on n1 to read input 0 there, which waited for it until
    the reduce timed out: "3 of 3 inputs combined; still waiting for".)"""
    on = lambda k: _made.options(resources={f"n{k}": 1})  # noqa: E731
    before = phalanx.cluster_stats()
    refs = [on(1).remote(0, 0.0), on(0).remote(1, 0.0), on(1).remote(2, 2.5)]
    start = time.monotonic()
    total = phalanx.collective.reduce(refs, op="sum", timeout=20)
    assert float(phalanx.get(total, timeout=30)[0]) == 1 + 2 + 3
    assert time.monotonic() - start < 10
    assert set(phalanx.collective.reduced_inputs(total)) == set(refs)
    after = phalanx.cluster_stats()
    assert after["reduce_chains"] == before["reduce_chains"] + 1
    assert after["reduce_fallbacks"] == before["reduce_fallbacks"]  # (not saved by starting over here)


def test_a_mismatch_along_the_chain_names_both_inputs(four_nodes):
    actors = actors_on([1, 2, 3])
    refs = [actors[0].grad.remote(), actors[1].grad.remote(0.3, (1000, 1000)), actors[2].grad.remote(0.6)]
    total = phalanx.collective.reduce(refs, timeout=60)
    with pytest.raises(phalanx.CollectiveError, match=r"reduce inputs do not match: .*input 1 \(ObjectRef\(%s\)\).* "
                       r"the same dtype and size but a different shape" % refs[1].hex()):
        phalanx.get(total, timeout=60)


def test_a_node_killed_mid_chain_the_chain_goes_on_from_the_link_before_it(four_nodes):
    """Inputs on n1, n2 and n3 arrive first: the chain runs n1 -> n2 -> n3.
    n3's raylet is killed before the two slow inputs on n0 arrive. The link
    reading n3's partial result fails; the chain goes on from n2's partial
    result (the links before the dead node are not redone): with a spare it
    completes with the right sum, without one it fails naming the lost
    input. Neither hangs, neither starts over on the caller's node."""
    raylets = {p.pid: p for n, p in four_nodes.procs if n == "raylet"}
    actors = actors_on([1, 2, 3, 0, 0])
    hosts = phalanx.get([a.host.remote() for a in actors], timeout=60)
    delays = [0.0, 0.15, 0.3, 1.5, 1.7]
    before = phalanx.cluster_stats()
    refs = [a.grad.remote(d) for a, d in zip(actors, delays)]
    spare = phalanx.collective.reduce(refs, num_objects=4, timeout=60)
    strict = phalanx.collective.reduce(refs, timeout=60)
    time.sleep(0.9)
    raylets[hosts[2]].send_signal(signal.SIGKILL)
    raylets[hosts[2]].wait()
    start = time.monotonic()
    assert float(phalanx.get(spare, timeout=60)[0]) == 2 + 3 + 1 + 1  # the actor on node k returns k + 1
    assert [refs.index(r) for r in phalanx.collective.reduced_inputs(spare)] == [0, 1, 3, 4]
    with pytest.raises(phalanx.CollectiveError, match=r"input 2 \(ObjectRef\(%s\)\)" % refs[2].hex()):
        phalanx.get(strict, timeout=60)
    assert time.monotonic() - start < 30
    after = phalanx.cluster_stats()
    assert after["reduce_chains"] == before["reduce_chains"] + 2
    assert after["reduce_rewinds"] == before["reduce_rewinds"] + 2
    assert after["reduce_fallbacks"] == before["reduce_fallbacks"]


def test_a_reduce_without_room_for_its_partials_fails_saying_so():
    """48 MiB stores: each holds its 30 MB input, but not a partial result
    beside it. The reduce fails with the store's reason, not a timeout
    (which link finds no room first varies)."""
    resources = [{f"n{k}": 2 if k == 0 else 1} for k in range(3)]
    with loopback_nodes(resources, ["--object-store-memory", str(48 << 20)]):
        refs = [g.grad.remote(0.0, (7_500_000,)) for g in actors_on([1, 2])]
        phalanx.wait(refs, num_returns=2, timeout=60, fetch_local=False)
        out = phalanx.collective.reduce(refs, timeout=30)
        with pytest.raises((phalanx.CollectiveError, phalanx.ObjectStoreFullError),
                           match=r"object store is full: cannot fit 30000192 bytes \(capacity 48 MiB"):
            phalanx.get(out, timeout=60)
