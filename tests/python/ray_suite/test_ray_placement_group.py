"""Placement groups on one node as Ray's `python/ray/tests/test_placement_group.py`,
`test_placement_group_2.py` and `test_placement_group_3.py` check them (ray-project/ray); each test is
named after the Ray test it follows. Tests that need several nodes (STRICT_SPREAD placement, node death)
stay in phalanx's multi-node tests."""
import pytest

import ray
from ray.util.placement_group import (get_placement_group, placement_group, placement_group_table,
                                      remove_placement_group)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from suite_utils import wait_for_condition


def test_placement_group_pack(shutdown_only, init_kwargs):
    ray.init(num_cpus=4, **init_kwargs)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    assert ray.get(pg.ready(), timeout=30) == pg or ray.get(pg.ready(), timeout=30) is not None

    @ray.remote(num_cpus=1)
    class Actor:
        def value(self):
            return 0

    actors = [Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i)).remote() for i in range(2)]
    assert ray.get([a.value.remote() for a in actors]) == [0, 0]
    table = placement_group_table(pg)
    assert table["strategy"] == "PACK"
    assert len(table["bundles"]) == 2


@pytest.mark.parametrize("strategy", ["PACK", "SPREAD", "STRICT_PACK"])
def test_placement_group_strategies_on_one_node(shutdown_only, strategy, init_kwargs):
    ray.init(num_cpus=4, **init_kwargs)
    pg = placement_group([{"CPU": 1}] * 2, strategy=strategy)
    ray.get(pg.ready(), timeout=30)
    assert placement_group_table(pg)["state"] == "CREATED"


def test_placement_group_task_resource_ids(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)

    @ray.remote(num_cpus=1)
    def f():
        return ray.get_runtime_context().get_assigned_resources()

    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=30)
    resources = ray.get(f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg)).remote())
    assert resources.get("CPU") == 1


def test_placement_group_actor_uses_bundle(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    pg = placement_group([{"CPU": 2}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_cpus=1)
    def f():
        return 1

    # Outside the group: nothing free (the bundle holds both CPUs).
    outside = f.remote()
    assert ray.wait([outside], timeout=0.5)[0] == []
    inside = f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg)).remote()
    assert ray.get(inside, timeout=30) == 1
    remove_placement_group(pg)
    assert ray.get(outside, timeout=30) == 1


def test_remove_placement_group(shutdown_only, init_kwargs):
    ray.init(num_cpus=4, **init_kwargs)
    pg = placement_group([{"CPU": 2}])
    ray.get(pg.ready(), timeout=30)
    wait_for_condition(lambda: ray.available_resources().get("CPU", 0) == 2)
    remove_placement_group(pg)
    wait_for_condition(lambda: placement_group_table(pg)["state"] == "REMOVED")
    wait_for_condition(lambda: ray.available_resources().get("CPU", 0) == 4)


def test_remove_placement_group_kills_its_actors(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_cpus=1)
    class A:
        def ping(self):
            return 1

    a = A.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg)).remote()
    assert ray.get(a.ping.remote()) == 1
    remove_placement_group(pg)

    errors = []

    def dead():
        try:
            ray.get(a.ping.remote(), timeout=5)
            return False
        except ray.exceptions.RayActorError as e:
            errors.append(str(e))
            return True

    wait_for_condition(dead, timeout=30)
    assert "placement group was removed" in errors[-1]  # Ray's words (test_placement_group_3's check)


def test_remove_pending_placement_group(shutdown_only, init_kwargs):
    ray.init(num_cpus=1, **init_kwargs)
    pg = placement_group([{"CPU": 4}])  # never fits
    ready, _ = ray.wait([pg.ready()], timeout=0.5)
    assert ready == []
    remove_placement_group(pg)
    wait_for_condition(lambda: placement_group_table(pg)["state"] == "REMOVED")


def test_pending_placement_group_wait(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    pg = placement_group([{"CPU": 4}])
    assert pg.wait(timeout_seconds=0.5) is False
    ok = placement_group([{"CPU": 1}])
    assert ok.wait(timeout_seconds=30) is True
    remove_placement_group(pg)


def test_placement_group_wait_api(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    assert pg.wait(timeout_seconds=30)
    assert pg.bundle_count == 2
    assert pg.bundle_specs == [{"CPU": 1}, {"CPU": 1}]


def test_named_placement_group(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    pg = placement_group([{"CPU": 1}], name="named-pg")
    ray.get(pg.ready(), timeout=30)
    same = get_placement_group("named-pg")
    assert same.id == pg.id
    with pytest.raises(ValueError):
        get_placement_group("no-such-pg")


def test_placement_group_table_all(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=30)
    table = placement_group_table()
    assert pg.id.hex() in table


def test_check_bundle_index(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_cpus=1)
    def f():
        return 1

    with pytest.raises(ValueError):
        f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=3)).remote()
    with pytest.raises(ValueError):
        f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=-2)).remote()


def test_placement_group_empty_bundle_error(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    with pytest.raises(ValueError):
        placement_group([])
    with pytest.raises(ValueError):
        placement_group([{"CPU": 0}])


def test_placement_group_invalid_strategy(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    with pytest.raises(ValueError):
        placement_group([{"CPU": 1}], strategy="NOT_A_STRATEGY")


def test_capture_child_tasks(shutdown_only, init_kwargs):
    ray.init(num_cpus=4, **init_kwargs)
    pg = placement_group([{"CPU": 2}])
    ray.get(pg.ready(), timeout=30)

    @ray.remote(num_cpus=1)
    def child():
        return ray.get_runtime_context().get_placement_group_id()

    @ray.remote(num_cpus=1)
    def parent():
        return ray.get(child.remote())

    got = ray.get(parent.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_capture_child_tasks=True)).remote(), timeout=30)
    assert got == pg.id.hex()


def test_placement_group_strategy_none_is_default(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    assert ray.get(f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None)).remote()) == 1


def test_detached_placement_group(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)
    pg = placement_group([{"CPU": 1}], lifetime="detached", name="detached-pg")
    ray.get(pg.ready(), timeout=30)
    assert placement_group_table(pg)["state"] == "CREATED"
    remove_placement_group(pg)
