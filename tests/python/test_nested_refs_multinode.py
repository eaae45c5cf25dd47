"""Refs nested inside values, across nodes (issue 16): lists, dicts and user
objects of refs passed to tasks and actors on another node, refs inside refs
(`put([ref])`, a task returning refs), and actor handles passed between nodes.
Each node that receives a nested ref borrows it from the node that sent it;
the sender keeps the object until every borrower has let go, and nothing is
left behind on either node when the last holder drops it."""
import gc
import time

import numpy as np
import pytest

import phalanx
from conftest import loopback_nodes, wait_until


@pytest.fixture
def two_nodes():
    """The driver's node (1 CPU) and a far node with {"far": 4} (1 CPU)."""
    with loopback_nodes([None, {"far": 4}]) as node:
        yield node


FAR = {"resources": {"far": 1}}


@phalanx.remote
def square(x):
    return x * x


@phalanx.remote
def big(i):
    return np.full(1 << 17, i, dtype=np.float64)  # 1 MiB: a store object


@phalanx.remote(**FAR)
def far_sum(refs):
    """Gets every ref in a list or a dict's values on the far node."""
    if isinstance(refs, dict):
        refs = list(refs.values())
    out = 0
    for v in phalanx.get(refs, timeout=30):
        out += float(np.sum(v)) if isinstance(v, np.ndarray) else v
    return out


@phalanx.remote(**FAR)
def far_node_stats():
    return phalanx.cluster_stats()


def _settled():
    """Ref entries and store objects on the driver's node and the far node."""
    gc.collect()
    here = phalanx.cluster_stats()
    far = phalanx.get(far_node_stats.remote(), timeout=30)
    return here, far


def test_list_and_dict_of_refs_to_a_task_on_another_node(two_nodes):
    refs = [square.remote(i) for i in range(5)]
    assert phalanx.get(far_sum.remote(refs), timeout=60) == sum(i * i for i in range(5))
    d = {f"k{i}": phalanx.put(i) for i in range(4)}
    assert phalanx.get(far_sum.remote(d), timeout=60) == 6


def test_refs_to_store_objects_and_pending_ones_cross(two_nodes):
    @phalanx.remote
    def slow(i):
        time.sleep(0.5)
        return i

    arrays = [big.remote(i) for i in range(3)]
    pending = [slow.remote(10), slow.remote(20)]  # not done when the far task starts
    total = phalanx.get(far_sum.remote(arrays + pending), timeout=60)
    assert total == sum(i * (1 << 17) for i in range(3)) + 30


def test_user_object_holding_refs_and_ref_inside_a_put(two_nodes):
    class Box:
        """A user object holding refs (defined here: pickled by value)."""
        def __init__(self, refs):
            self.refs = refs

    @phalanx.remote(**FAR)
    def open_box(box):
        return sum(phalanx.get(box.refs, timeout=30))

    @phalanx.remote(**FAR)
    def open_outer(outer):
        # A ref argument arrives as its value (a list of refs); one nested in
        # a list arrives as a ref.
        if isinstance(outer, list) and isinstance(outer[0], phalanx.ObjectRef) and len(outer) == 1:
            outer = phalanx.get(outer[0], timeout=30)
        return sum(phalanx.get(outer, timeout=30))

    assert phalanx.get(open_box.remote(Box([phalanx.put(3), square.remote(4)])), timeout=60) == 19
    outer = phalanx.put([phalanx.put(5), phalanx.put(6)])  # a ref whose value holds refs
    assert phalanx.get(open_outer.remote(outer), timeout=60) == 11
    assert phalanx.get(open_outer.remote([outer]), timeout=60) == 11


def test_a_task_on_another_node_returns_refs(two_nodes):
    @phalanx.remote(**FAR)
    def make_refs(n):
        return [square.remote(i) for i in range(n)] + [phalanx.put(np.ones(1 << 17))]

    @phalanx.remote(**FAR)
    def make_one():
        return phalanx.put("made far away")

    refs = phalanx.get(make_refs.remote(4), timeout=60)
    values = phalanx.get(refs, timeout=60)
    assert values[:4] == [0, 1, 4, 9] and values[4].sum() == 1 << 17
    inner = phalanx.get(make_one.remote(), timeout=60)
    assert phalanx.get(inner, timeout=60) == "made far away"


def test_an_actor_on_another_node_keeps_refs_after_the_caller_drops_them(two_nodes):
    @phalanx.remote(**FAR)
    class Keeper:
        def __init__(self):
            self.kept = []

        def keep(self, refs):
            self.kept.extend(refs)
            return len(self.kept)

        def total(self):
            return sum(float(np.sum(v)) for v in phalanx.get(self.kept, timeout=30))

        def make(self, n):
            return [square.remote(i) for i in range(n)]

    k = Keeper.remote()
    refs = [phalanx.put(i) for i in range(3)] + [big.remote(2)]
    assert phalanx.get(k.keep.remote(refs), timeout=60) == 4
    del refs
    gc.collect()
    time.sleep(0.5)  # the driver's drops reach its raylet
    assert phalanx.get(k.total.remote(), timeout=60) == 3 + 2 * (1 << 17)
    made = phalanx.get(k.make.remote(5), timeout=60)  # refs made on the far node, returned by a direct call
    assert phalanx.get(made, timeout=60) == [0, 1, 4, 9, 16]


def test_actor_handles_travel_between_nodes(two_nodes):
    @phalanx.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

    @phalanx.remote(**FAR)
    def bump(counter, times):
        return phalanx.get([counter.add.remote(1) for _ in range(times)], timeout=30)[-1]

    @phalanx.remote(**FAR)
    class Caller:
        def __init__(self, counter):
            self.counter = counter

        def bump(self, k):
            return phalanx.get(self.counter.add.remote(k), timeout=30)

    here = Counter.remote()  # on the driver's node
    there = Counter.options(resources={"far": 1}).remote()
    assert phalanx.get(bump.remote(here, 3), timeout=60) == 3
    assert phalanx.get(bump.remote(there, 2), timeout=60) == 2
    c = Caller.remote(here)
    assert phalanx.get(c.bump.remote(10), timeout=60) == 13
    assert phalanx.get(here.add.remote(0), timeout=30) == 13


def test_nested_refs_leave_nothing_behind(two_nodes):
    @phalanx.remote(**FAR)
    class Keeper:
        def __init__(self):
            self.kept = None

        def keep(self, refs):
            self.kept = refs
            return sum(float(np.sum(v)) for v in phalanx.get(refs, timeout=30))

        def drop(self):
            self.kept = None
            gc.collect()

    k = Keeper.remote()
    phalanx.get(k.keep.remote([phalanx.put(0)]), timeout=60)
    phalanx.get(k.drop.remote(), timeout=30)
    base_here, base_far = _settled()
    for i in range(30):
        refs = [phalanx.put(i), square.remote(i), big.remote(i)]
        assert phalanx.get(far_sum.remote(refs), timeout=60) == i + i * i + i * (1 << 17)
        assert phalanx.get(k.keep.remote(refs), timeout=60) == i + i * i + i * (1 << 17)
        del refs
    phalanx.get(k.drop.remote(), timeout=30)

    def back_to_base():
        here, far = _settled()
        return (here["ref_entries"] <= base_here["ref_entries"] and
                here["store_objects"] <= base_here["store_objects"] and
                far["ref_entries"] <= base_far["ref_entries"] + 2 and  # (the stats task's own return)
                far["store_objects"] <= base_far["store_objects"])
    wait_until(back_to_base, timeout=30, interval=0.3, what="every nested ref to be freed on both nodes")


def test_generator_items_holding_refs_stream_from_another_node(two_nodes):
    @phalanx.remote(**FAR)
    def produce(n):
        for i in range(n):
            yield [phalanx.put(i), square.remote(i)]

    got = []
    for item in produce.remote(4):
        pair = phalanx.get(item, timeout=60)
        got.append(phalanx.get(pair, timeout=60))
    assert got == [[i, i * i] for i in range(4)]

    @phalanx.remote(num_returns="dynamic", **FAR)
    def produce_all(n):
        for i in range(n):
            yield phalanx.put(i * 10)

    refs = phalanx.get(produce_all.remote(3), timeout=60)
    assert [phalanx.get(phalanx.get(r, timeout=60), timeout=60) for r in refs] == [0, 10, 20]

    @phalanx.remote(**FAR)
    def total(gen):  # a DynamicObjectRefGenerator, passed by value to another node
        return sum(phalanx.get(phalanx.get(r, timeout=30), timeout=30) for r in gen)

    @phalanx.remote(num_returns="dynamic")
    def produce_here(n):
        for i in range(n):
            yield phalanx.put(i + 1)

    assert phalanx.get(total.remote(phalanx.get(produce_here.remote(3), timeout=60)), timeout=60) == 6
    assert phalanx.get(total.remote(phalanx.get(produce_all.remote(3), timeout=60)), timeout=60) == 30
