"""Lineage reconstruction (docs/fault-tolerance.md): a result whose only copy
was on a node killed with SIGKILL is made again by running its task once
more, while its task has retries left; what cannot be made again raises
ObjectLostError saying which and why.

The node that submits a task copies its results as soon as it finishes, so
a node's death loses a result only while that copy runs: these tests slow
copies down (4 KiB ranges, one at a time: about 0.7 s for 64 MiB) and kill
the node the moment the task is reported done. A rerun finds its arguments
even when the program let go of them (the lineage holds them), and a reduce
over results of a node that dies goes on with them made again. A node that
only borrowed the ref (it came nested in a value), whose lender died with
the copy, has the node that submitted the task make it again; a copy that
waits on a rerun placed on its own node ends when the rerun makes it."""
import os
import time

import numpy as np
import pytest

import phalanx
from phalanx.remote_function import NodeAffinitySchedulingStrategy

from .util import kill9, loopback_nodes, raylet_logs, wait_until

MIB = 1 << 20
N = 16 * MIB  # float32s: 64 MiB
SLOW_COPIES = ["--transfer-chunk-bytes", "4096", "--transfer-window", "1"]


@phalanx.remote(num_returns=2, max_retries=2, resources={"b": 0.01})
def _make(i):
    return np.full(N, i, dtype=np.float32), os.getppid()


@phalanx.remote(num_returns=2, max_retries=2, resources={"b": 0.01})
def _plus_one(a):
    return a + 1, os.getppid()


@phalanx.remote(num_returns=2, max_retries=0, resources={"b": 0.01})
def _make_once(i):
    return np.full(N, i, dtype=np.float32), os.getppid()


@phalanx.remote(resources={"b": 0.01})
def _put_there(i):
    return [phalanx.put(np.full(MIB, i, dtype=np.float32)), os.getppid()]


@phalanx.remote(num_returns=2, max_retries=2, resources={"b": 0.01})
def _make_slow_again(i, marker):
    if os.path.exists(marker):  # the rerun: slow, so that no copy exists while the reader looks
        time.sleep(3)
    else:
        open(marker, "w").close()
    return np.full(N, i, dtype=np.float32), os.getppid()


@phalanx.remote(resources={"d": 0.01})
class _Reader:
    def keep(self, refs):  # the ref comes nested: this node borrows it (from the caller's node)
        self.refs = refs
        return os.getppid()

    def ends(self):
        a = phalanx.get(self.refs[0], timeout=60)
        return float(a[0]), float(a[-1])


@phalanx.remote(num_cpus=0, resources={"b": 0.01})  # (the node's one CPU stays for the task)
class _Relay:
    def node(self):
        return phalanx.get_node_id()

    def hand(self, reader, refs):  # lends the ref to the reader's node: the lender is this node
        return os.getppid(), phalanx.get(reader.keep.remote(refs), timeout=30)


def _raylet(node, pid):
    return next(p for n, p in node.procs if n == "raylet" and p.pid == pid)


@pytest.fixture
def b_nodes():
    """A head that the driver uses (no "b") and two nodes with {"b": 1}."""
    with loopback_nodes([None, {"b": 1}, {"b": 1}], extra_args=SLOW_COPIES) as node:
        yield node


def _b_node_ids():
    return [n["node_id"] for n in phalanx.nodes() if n.get("alive", True) and "b" in n["resources_total"]]


def test_a_result_on_a_killed_node_is_made_again(b_nodes):
    value, where = _make.remote(7)
    first = phalanx.get(where, timeout=30)
    kill9(first)
    out = phalanx.get(value, timeout=60)  # its copy is gone: the task runs again on the other node
    assert out.shape == (N,) and out[0] == 7 and out[-1] == 7
    assert "to rebuild object" in raylet_logs(b_nodes.session_dir)
    assert phalanx.cluster_stats()["tasks_reconstructed"] == 1
    # Once the result is copied here, its spec (and what it held) goes.
    wait_until(lambda: phalanx.cluster_stats()["lineage_specs"] == 0, timeout=10, what="the lineage to empty")
    assert phalanx.cluster_stats()["lineage_bytes"] == 0


def test_a_rerun_reads_its_arguments_again_even_one_the_program_let_go_of(b_nodes):
    node = _b_node_ids()[0]
    there = NodeAffinitySchedulingStrategy(node, soft=True)  # on one node, elsewhere once it is gone
    a, where_a = _make.options(scheduling_strategy=there).remote(1)
    b, where_b = _plus_one.options(scheduling_strategy=there).remote(a)
    c, where_c = _plus_one.options(scheduling_strategy=there).remote(_make.options(scheduling_strategy=there).remote(10)[0])
    pid = phalanx.get(where_b, timeout=30)
    assert phalanx.get(where_c, timeout=30) == pid
    time.sleep(0.2)  # (the release of c's argument, which nothing in the program holds, reaches the raylet)
    kill9(pid)
    out = phalanx.get(b, timeout=60)  # b runs again; its argument a is still held (here, or made again)
    assert out[0] == 2 and out[-1] == 2
    out = phalanx.get(c, timeout=60)  # c's argument: held by c's lineage until c is safe
    assert out[0] == 11 and out[-1] == 11


def test_what_cannot_be_made_again_says_which_and_why(b_nodes):
    once, where_once = _make_once.remote(3)
    ref_there, where_put = phalanx.get(_put_there.remote(5), timeout=30)
    victims = {phalanx.get(where_once, timeout=30), where_put}
    for pid in victims:
        kill9(pid)
    with pytest.raises(phalanx.exceptions.ObjectLostError) as e:
        phalanx.get(once, timeout=60)
    assert "no retries left (max_retries=0)" in str(e.value), str(e.value)
    with pytest.raises(phalanx.exceptions.ObjectLostError) as e:
        phalanx.get(ref_there, timeout=60)
    msg = str(e.value)
    assert "no node has a copy left" in msg and "it was made by put()" in msg, msg


def test_a_reduce_waits_for_an_input_made_again(b_nodes):
    """The inputs of a reduce are results on the two "b" nodes; one of those
    nodes dies while the reduce (a chain through both: four inputs) runs. Its
    inputs are made again on the other node and the reduce goes on with
    them: the sum is right, and the raylet's log says they were made again."""
    first, second = _b_node_ids()
    refs, wheres = [], []
    for k, node in ((1, first), (2, second), (3, first), (4, second)):
        ref, where = _make.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True)).remote(k)
        refs.append(ref)
        wheres.append(where)
    pids = phalanx.get(wheres, timeout=30)
    assert pids[0] != pids[1]
    total = phalanx.collective.reduce(refs, op="sum", timeout=90)
    kill9(pids[1])
    out = phalanx.get(total, timeout=90)
    assert out.shape == (N,) and out[0] == 10 and out[-1] == 10
    assert "to rebuild object" in raylet_logs(b_nodes.session_dir)


def test_a_borrower_has_the_submitting_node_make_a_lost_result_again(tmp_path):
    """The result's only copy is on a "b" node, and so is the node that lent
    the ref to an actor on a third node (the ref came nested, through an
    actor on that "b" node); that node dies. The reader's node has no copy
    to find, no lender to ask and no lineage of its own: it asks the node
    that submitted the task (the driver's), which runs the task again on the
    other "b" node and serves the copy. The rerun takes 3 s, so the reader
    finds no copy anywhere first (before the fix it raised ObjectLostError:
    "no spec of the task that made it is kept on this node")."""
    with loopback_nodes([None, {"b": 1}, {"b": 1}, {"d": 1}], extra_args=SLOW_COPIES) as node:
        reader = _Reader.remote()
        relay = _Relay.remote()
        there = NodeAffinitySchedulingStrategy(phalanx.get(relay.node.remote(), timeout=30), soft=True)
        value, where = _make_slow_again.options(scheduling_strategy=there).remote(7, str(tmp_path / "ran"))
        relay_raylet, reader_raylet = phalanx.get(relay.hand.remote(reader, [value]), timeout=30)
        pid = phalanx.get(where, timeout=30)
        assert pid == relay_raylet != reader_raylet
        kill9(pid)
        assert phalanx.get(reader.ends.remote(), timeout=90) == (7.0, 7.0)
        logs = raylet_logs(node.session_dir)
        assert "to rebuild object" in logs
        # The reader's node found no copy left: it looked up the node that submitted the task (the driver's)
        # and asked it for the object (or the object arrived from the driver's node's rerun while it looked).
        # In about one run in ten here, the reader's node instead waits on the driver's node, whose own copy
        # back of the result failed with the node and which runs the task again: the same value, by the
        # directory, without the look-up (docs/fault-tolerance.md).
        mine = [line for line in logs.splitlines() if f" {reader_raylet} " in line]
        if any("no node has a copy left" in line for line in mine):
            said = "\n".join(mine)
            assert "looking up the node that submitted its task" in said, said
            assert ("which submitted its task, for it" in said
                    or "arrived while the node that submitted its task was looked up" in said), said


def test_a_copy_in_flight_ends_when_a_rerun_makes_the_object_on_its_node(tmp_path):
    """As above, but the actor that lent the ref lives on the other "b"
    node, which survives: it copies the object for the reader from the
    driver's node, which waits for the rerun, and the rerun is placed on
    that same node. The object made there ends that node's copy, and the
    readers get it (before the fix, the two nodes waited on each other and
    the reader's get timed out)."""
    with loopback_nodes([None, {"b": 1}, {"b": 1}, {"d": 1}], extra_args=SLOW_COPIES) as node:
        reader = _Reader.remote()
        relay = _Relay.remote()
        relay_node = phalanx.get(relay.node.remote(), timeout=30)
        other = next(n for n in _b_node_ids() if n != relay_node)
        there = NodeAffinitySchedulingStrategy(other, soft=True)
        value, where = _make_slow_again.options(scheduling_strategy=there).remote(7, str(tmp_path / "ran"))
        relay_raylet, reader_raylet = phalanx.get(relay.hand.remote(reader, [value]), timeout=30)
        pid = phalanx.get(where, timeout=30)
        assert len({pid, relay_raylet, reader_raylet}) == 3
        kill9(pid)
        assert phalanx.get(reader.ends.remote(), timeout=30) == (7.0, 7.0)
        assert "to rebuild object" in raylet_logs(node.session_dir)
