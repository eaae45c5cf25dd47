"""Allreduce across nodes (collectives/allreduce.h): every input gets its own
result, made on the input's node by reduce-scatter + allgather over the
inputs' nodes. Four raylets on loopback: the results, where they are, what
mismatched inputs and a dead node do, and that nothing is left behind."""
import time

import numpy as np
import pytest

import phalanx
from phalanx import _core
from conftest import loopback_nodes, wait_until
from test_reduce_chain import N, actors_on, directory_keys, four_nodes  # noqa: F401 (a fixture)


def locations(node, ref):
    """The nodes (hex) the object directory lists for `ref`."""
    host, port = node.redis_address.split(":")
    fields = _core.redis_command(host, int(port), ["HKEYS", "objdir:" + ref.hex()], 2.0)
    return {f.decode() if isinstance(f, bytes) else f for f in fields} - {"size"}


def test_each_input_gets_the_sum_made_on_its_own_node(four_nodes):
    actors = actors_on([1, 2, 3, 0])
    hosts = phalanx.get([a.host.remote() for a in actors], timeout=60)
    assert len(set(hosts)) == 4
    keys_before = directory_keys(four_nodes)
    before = phalanx.cluster_stats()
    # Staggered: the reduction starts with the first two.
    refs = [a.grad.remote(d) for a, d in zip(actors, [0.0, 0.2, 0.4, 0.6])]
    outs = phalanx.collective.allreduce(refs, op="sum", timeout=60)
    assert len(outs) == 4 and len({o.hex() for o in outs}) == 4
    # A task on an input's node reads its result there: passing the ref
    # copies nothing to the caller's node, whose store gains only the input
    # made there and its result (once the partial slices are dropped).
    assert [phalanx.get(actors[k].total.remote(outs[k]), timeout=60) for k in (0, 1)] == [10.0 * N] * 2
    wait_until(lambda: phalanx.cluster_stats()["store_objects"] == before["store_objects"] + 2, timeout=10.0,
               what="only input 3 and its result in this node's store")
    values = phalanx.get(outs, timeout=60)
    for v in values:
        assert v.shape == (N,) and v.dtype == np.float32
        np.testing.assert_array_equal(v, np.full(N, 2 + 3 + 4 + 1, np.float32))
    after = phalanx.cluster_stats()
    assert after["allreduce_sliced"] == before["allreduce_sliced"] + 1
    # Each result was made where its input was: the input's node is listed
    # for it (the caller's node too for those it read itself).
    for r, o in zip(refs, outs):
        assert locations(four_nodes, r) <= locations(four_nodes, o)

    # max, int32, an odd size (slices do not divide it evenly).
    refs = [a.grad.remote(0.0, (333_333,), "int32") for a in actors]
    outs = phalanx.collective.allreduce(refs, op="max", timeout=60)
    for v in phalanx.get(outs, timeout=60):
        assert v.dtype == np.int32 and v.shape == (333_333,) and v.min() == 4 and v.max() == 4

    del refs, outs, values, v, r, o
    wait_until(lambda: directory_keys(four_nodes) == keys_before, timeout=10.0,
               what="the directory to forget every slice and result")
    wait_until(lambda: phalanx.cluster_stats()["reduce_steps"] == 0, timeout=10.0, what="the slices to be dropped")


def test_mismatched_inputs_fail_every_result_naming_them(four_nodes):
    actors = actors_on([1, 2, 3])
    refs = [actors[0].grad.remote(), actors[1].grad.remote(0.2, (N + 1024,)), actors[2].grad.remote()]
    outs = phalanx.collective.allreduce(refs, timeout=60)
    want = r"allreduce inputs do not match: .*input 1 \(ObjectRef\(%s\)\)" % refs[1].hex()
    for o in outs:
        with pytest.raises(phalanx.CollectiveError, match=want):
            phalanx.get(o, timeout=60)
    # Same size, another dtype: the slice holding the header finds it.
    refs = [actors[0].grad.remote(), actors[1].grad.remote(0.2, (N,), "int32"), actors[2].grad.remote(0.3)]
    outs = phalanx.collective.allreduce(refs, timeout=60)
    for o in outs:
        with pytest.raises(phalanx.CollectiveError, match=r"reduce inputs do not match: .*float32.*int32"):
            phalanx.get(o, timeout=60)


@phalanx.remote
def made_on_another_node(value):
    return np.full(N, value, np.float32)


def test_wait_without_fetch_counts_values_on_other_nodes_and_copies_none(four_nodes):
    # Waiting for a collective's inputs must not pull them all to the caller.
    # Results that come back through the raylets (a task placed on another node; an actor's
    # calls too, until the caller has its direct route) stay where they were made as well.
    here = phalanx.get_runtime_context().get_node_id()
    refs = [made_on_another_node.options(resources={f"n{k}": 1}).remote(k) for k in (1, 2)]
    ready, _ = phalanx.wait(refs, num_returns=2, timeout=30, fetch_local=False)
    assert len(ready) == 2
    time.sleep(0.3)
    for r in refs:
        assert here not in locations(four_nodes, r), "a result placed on another node stays there till read"
    assert [float(phalanx.get(r, timeout=30)[0]) for r in refs] == [1.0, 2.0]
    assert all(here in locations(four_nodes, r) for r in refs), "read: copied here"
    del refs, ready

    actors = actors_on([1, 2])
    phalanx.get([a.host.remote() for a in actors], timeout=60)
    refs = [a.grad.remote(d) for a, d in zip(actors, [0.0, 0.5])]
    ready, not_ready = phalanx.wait(refs, num_returns=1, timeout=30, fetch_local=False)
    assert [r.hex() for r in ready] == [refs[0].hex()] and len(not_ready) == 1
    ready, not_ready = phalanx.wait(refs, num_returns=2, timeout=30, fetch_local=False)
    assert len(ready) == 2 and not not_ready
    # (Whether the inputs are copied to this node: by the object directory's record of each, not
    # by a count of this node's objects, which another test's late frees can move.)
    time.sleep(0.3)  # (room for a copy that should not happen)
    for r in refs:
        assert here not in locations(four_nodes, r), "nothing was copied to the caller's node"
    ready, _ = phalanx.wait(refs, num_returns=2, timeout=30)  # the default, as Ray's: copies them here
    assert len(ready) == 2
    wait_until(lambda: all(here in locations(four_nodes, r) for r in refs), timeout=10.0,
               what="both inputs copied to the caller's node")


@pytest.fixture
def four_nodes_through_raylets(monkeypatch):
    """four_nodes with every actor call sent through the raylets (the route a
    call takes before its caller knows the direct one)."""
    monkeypatch.setenv("PHALANX_DIRECT_ACTOR_CALLS", "0")
    with loopback_nodes([{f"n{k}": 2 if k == 0 else 1} for k in range(4)],
                        ["--transfer-chunk-bytes", "262144"]) as node:
        yield node


def test_calls_through_the_raylets_leave_inputs_and_results_where_made(four_nodes_through_raylets):
    actors = actors_on([1, 2])
    phalanx.get([a.host.remote() for a in actors], timeout=60)
    here = phalanx.get_runtime_context().get_node_id()
    refs = [a.grad.remote(d) for a, d in zip(actors, [0.0, 0.2])]
    outs = phalanx.collective.allreduce(refs, op="sum", timeout=60)
    # A result handed back to the actor that made it: read on its node, not copied here first.
    assert [phalanx.get(a.total.remote(o), timeout=60) for a, o in zip(actors, outs)] == [5.0 * N] * 2
    # ... nor an input handed to the actor on the other node: copied there from where it was made.
    assert phalanx.get(actors[1].total.remote(refs[0]), timeout=60) == 2.0 * N
    assert _core.direct_calls_sent() == 0
    nodes = four_nodes_through_raylets
    for r in refs + outs:
        assert here not in locations(nodes, r), "nothing was copied to the caller's node"


def test_two_inputs_on_one_node_in_any_arrival_order(four_nodes):
    # The ring visits node 0 once; a chain link may read the partial result
    # of the link before it on its own node (placed before it on the same
    # connection), in whichever order the inputs become ready.
    for placement in ([0, 0, 1, 2], [1, 0, 2, 0]):
        actors = actors_on(placement)
        want = np.full(N, sum(k + 1 for k in placement), np.float32)
        for delays in ([0.0] * 4, [0.0, 0.1, 0.2, 0.3], [0.3, 0.2, 0.1, 0.0]):
            refs = [a.grad.remote(d) for a, d in zip(actors, delays)]
            for v in phalanx.get(phalanx.collective.allreduce(refs, timeout=60), timeout=60):
                np.testing.assert_array_equal(v, want)
        for a in actors:
            phalanx.kill(a)
