"""Placement groups: bundles reserved atomically across nodes (two-phase,
through the GCS), tasks and actors scheduled into a bundle, removal, a
group that cannot be placed (pg.ready() times out naming the bundles),
rescheduling when a node holding bundles dies, and bad input."""
import os
import signal

import pytest

import phalanx
from conftest import loopback_nodes, wait_until
from phalanx.exceptions import ActorDiedError, GetTimeoutError, InfeasibleError
from phalanx.util.placement_group import (get_placement_group, placement_group, placement_group_table,
                                          remove_placement_group)
from phalanx.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@phalanx.remote
def where():
    return phalanx.get_runtime_context().get_node_id()


@phalanx.remote
class Member:
    def node(self):
        return phalanx.get_runtime_context().get_node_id()


def in_bundle(pg, i=-1):
    return PlacementGroupSchedulingStrategy(pg, i)


def test_bundles_are_reserved_and_used(cluster):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK", name="pair")
    assert phalanx.get(pg.ready(), timeout=20) == pg  # as in Ray: the group itself
    # Both CPUs set aside for the group (the GCS hears of it in the raylet's next loop turn, which
    # may come after this process has the ready value: available_resources reads the GCS).
    wait_until(lambda: phalanx.available_resources().get("CPU", 0) == 0, timeout=5, what="CPUs set aside")
    # A task outside the group waits; tasks inside it run.
    outside = where.remote()
    assert phalanx.wait([outside], timeout=0.5)[0] == []
    assert phalanx.get([where.options(scheduling_strategy=in_bundle(pg, i)).remote() for i in (0, 1, -1)],
                       timeout=20)
    table = placement_group_table(pg)
    assert table["state"] == "CREATED" and table["strategy"] == "PACK" and table["name"] == "pair"
    assert len(table["bundles_to_node_id"]) == 2
    assert get_placement_group("pair") == pg
    remove_placement_group(pg)
    assert phalanx.get(outside, timeout=20)  # the CPUs are back
    wait_until(lambda: phalanx.available_resources().get("CPU", 0) == 2, timeout=10, what="CPUs back")
    assert not any("_group_" in k for k in phalanx.available_resources())


def test_actor_in_a_bundle_dies_with_its_group(cluster):
    pg = placement_group([{"CPU": 1}])
    phalanx.get(pg.ready(), timeout=20)
    a = Member.options(num_cpus=1, scheduling_strategy=in_bundle(pg, 0)).remote()
    assert phalanx.get(a.node.remote(), timeout=20)
    remove_placement_group(pg)
    with pytest.raises(ActorDiedError, match="placement group was removed"):
        phalanx.get(a.node.remote(), timeout=20)
    wait_until(lambda: phalanx.available_resources().get("CPU", 0) == 2, timeout=10, what="CPUs back")


def test_a_group_that_cannot_be_placed_names_its_bundles(cluster):
    pg = placement_group([{"CPU": 1}, {"CPU": 64}], strategy="STRICT_PACK", name="too-big")
    with pytest.raises(GetTimeoutError, match=r"'too-big'.*\{'CPU': 64.0\}.*STRICT_PACK"):
        phalanx.get(pg.ready(), timeout=1)
    assert not pg.wait(0.2)
    # Work in it waits for it, with no warning that it is infeasible; removing the group fails it.
    ref = where.options(scheduling_strategy=in_bundle(pg, 0)).remote()
    assert phalanx.wait([ref], timeout=0.5)[0] == []
    remove_placement_group(pg)
    with pytest.raises(InfeasibleError, match="removed"):
        phalanx.get(ref, timeout=20)
    with pytest.raises(InfeasibleError, match="never be ready"):
        phalanx.get(pg.ready(), timeout=20)
    assert phalanx.available_resources().get("CPU", 0) == 2  # nothing stayed set aside


def test_a_group_waits_for_room_then_is_placed(cluster):
    first = placement_group([{"CPU": 2}])
    phalanx.get(first.ready(), timeout=20)
    second = placement_group([{"CPU": 1}])
    assert not second.wait(0.5)  # no room while the first holds both CPUs
    assert "fits on no node" in second.why_not_ready()
    remove_placement_group(first)
    assert phalanx.get(second.ready(), timeout=20)
    remove_placement_group(second)


def test_bad_input_is_a_clear_error(cluster):
    with pytest.raises(ValueError, match="reserves no resources"):
        placement_group([{"CPU": 0}])
    with pytest.raises(ValueError, match="non-empty list"):
        placement_group([])
    with pytest.raises(ValueError, match="strategy must be one of"):
        placement_group([{"CPU": 1}], strategy="CLOSE")
    with pytest.raises(ValueError, match=">= 0"):
        placement_group([{"CPU": -1}])
    with pytest.raises(ValueError, match="_group_"):
        placement_group([{"CPU_group_0_x": 1}])
    pg = placement_group([{"CPU": 1}])
    with pytest.raises(ValueError, match="bundle index 1 is invalid"):
        PlacementGroupSchedulingStrategy(pg, 1)
    with pytest.raises(TypeError, match="takes a PlacementGroup"):
        PlacementGroupSchedulingStrategy("pg")
    with pytest.raises(TypeError, match="takes a PlacementGroup"):
        remove_placement_group(None)
    remove_placement_group(pg)


def test_create_and_remove_in_a_loop_keeps_nothing(cluster):
    for _ in range(200):
        pg = placement_group([{"CPU": 1}])
        phalanx.get(pg.ready(), timeout=20)
        remove_placement_group(pg)
    assert phalanx.available_resources().get("CPU", 0) == 2
    assert not any("_group_" in k for k in phalanx.available_resources())


def test_strict_spread_puts_each_bundle_on_its_own_node():
    with loopback_nodes([None, None, None]):
        pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
        assert phalanx.get(pg.ready(), timeout=20)
        nodes = phalanx.get([where.options(scheduling_strategy=in_bundle(pg, i)).remote() for i in range(3)],
                            timeout=20)
        assert len(set(nodes)) == 3
        assert set(placement_group_table(pg)["bundles_to_node_id"].values()) == set(nodes)
        # STRICT_SPREAD with more bundles than nodes waits, and says why.
        four = placement_group([{"CPU": 0.1}] * 4, strategy="STRICT_SPREAD")
        with pytest.raises(GetTimeoutError, match="STRICT_SPREAD"):
            phalanx.get(four.ready(), timeout=1)
        remove_placement_group(four)
        remove_placement_group(pg)


def test_pack_and_strict_pack_share_a_node():
    with loopback_nodes([{"slots": 4}, {"slots": 4}]):
        pg = placement_group([{"slots": 2}, {"slots": 2}], strategy="STRICT_PACK")
        assert phalanx.get(pg.ready(), timeout=20)
        nodes = phalanx.get([where.options(num_cpus=0, resources={"slots": 1},
                                           scheduling_strategy=in_bundle(pg, i)).remote() for i in range(2)],
                            timeout=20)
        assert len(set(nodes)) == 1
        # A task asking for what no bundle holds is refused at .remote(), as Ray refuses it (an actor that asks
        # for nothing needs 1 CPU in some bundle: Ray creates it with one).
        with pytest.raises(ValueError, match=r"cannot fit into any bundles for the placement group"):
            where.options(scheduling_strategy=in_bundle(pg, 0)).remote()
        with pytest.raises(ValueError, match=r"requires 1 CPU for creation"):
            Member.options(scheduling_strategy=in_bundle(pg, 0)).remote()
        remove_placement_group(pg)


def test_a_bundle_on_another_node_takes_its_actor_there():
    with loopback_nodes([None, {"far": 1}]) as nodes:
        pg = placement_group([{"far": 1}])
        assert phalanx.get(pg.ready(), timeout=20)
        a = Member.options(num_cpus=0, scheduling_strategy=in_bundle(pg, 0)).remote()
        far_node = placement_group_table(pg)["bundles_to_node_id"][0]
        assert phalanx.get(a.node.remote(), timeout=20) == far_node
        assert far_node != phalanx.get_runtime_context().get_node_id()
        assert phalanx.get([a.node.remote() for _ in range(20)], timeout=20) == [far_node] * 20
        # The counts of work each node reports stay sane (calls forwarded to the
        # actor's node once drove the caller's "running" count below zero).
        seen = {n["node_id"]: n["heartbeat_ms"] for n in phalanx.nodes() if n["alive"]}
        wait_until(lambda: all(n["heartbeat_ms"] > seen[n["node_id"]] for n in phalanx.nodes() if n["node_id"] in seen),
                   what="every node's next record (a heartbeat)")
        for n in phalanx.nodes():
            assert 0 <= n["tasks_running"] < 100 and 0 <= n["tasks_queued"] < 100, n
        del nodes


def test_a_dead_nodes_bundles_are_placed_again():
    with loopback_nodes([None, {"slot": 1}, {"slot": 1}]) as node:
        pg = placement_group([{"slot": 1}], name="movable")
        assert phalanx.get(pg.ready(), timeout=20)
        first = placement_group_table(pg)["bundles_to_node_id"][0]
        # Kill the raylet holding the bundle: the group is placed on the other node.
        pid = next(n["pid"] for n in phalanx.nodes() if n["node_id"] == first)
        os.kill(pid, signal.SIGKILL)

        def moved():
            t = placement_group_table(pg)
            return t["state"] == "CREATED" and t["bundles_to_node_id"].get(0) not in (None, first)
        wait_until(moved, timeout=30, what="the bundle placed again")
        second = placement_group_table(pg)["bundles_to_node_id"][0]
        assert phalanx.get(where.options(num_cpus=0, scheduling_strategy=in_bundle(pg, 0)).remote(),
                           timeout=20) == second


def test_an_actor_in_a_dead_nodes_bundle_restarts_where_the_bundle_goes():
    with loopback_nodes([None, {"slot": 1}, {"slot": 1}]):
        pg = placement_group([{"slot": 1}])
        assert phalanx.get(pg.ready(), timeout=20)
        first = placement_group_table(pg)["bundles_to_node_id"][0]
        a = Member.options(num_cpus=0, max_restarts=1, max_task_retries=1,
                           scheduling_strategy=in_bundle(pg, 0)).remote()
        assert phalanx.get(a.node.remote(), timeout=20) == first
        pid = next(n["pid"] for n in phalanx.nodes() if n["node_id"] == first)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: placement_group_table(pg)["state"] == "CREATED" and
                   placement_group_table(pg)["bundles_to_node_id"][0] != first, timeout=30,
                   what="the bundle placed again")
        second = placement_group_table(pg)["bundles_to_node_id"][0]
        assert phalanx.get(a.node.remote(), timeout=30) == second  # restarted there (max_restarts=1)
