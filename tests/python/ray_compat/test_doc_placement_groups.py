"""Ray's "Placement Groups" page (docs.ray.io/en/latest/ray-core/scheduling/placement-group.html),
as the documentation writes it, with `import phalanx as ray`: create a
group, wait for it, schedule an actor into it, a group that cannot be
created, strategies, removal, named and detached groups. The page's
cluster has 2 CPUs and 2 GPUs (declared: no real GPU is needed)."""
import pytest

import phalanx as ray
from phalanx.util.placement_group import (get_placement_group, placement_group, placement_group_table,
                                          remove_placement_group)
from phalanx.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@pytest.fixture
def two_cpus_two_gpus(fresh_cluster):
    # "Create a single node Ray cluster with 2 CPUs and 2 GPUs."
    return fresh_cluster(num_cpus=2, num_gpus=2)


def test_create_schedule_and_remove(two_cpus_two_gpus):
    # "Reserve a placement group of 1 bundle that reserves 1 CPU and 1 GPU."
    pg = placement_group([{"CPU": 1, "GPU": 1}])
    # "Wait until placement group is created."
    ray.get(pg.ready(), timeout=10)
    # "You can also use ray.wait."
    ready, unready = ray.wait([pg.ready()], timeout=10)
    assert ready and not unready
    # "You can look at placement group states using this API."
    assert placement_group_table(pg)["state"] == "CREATED"

    # "Cannot create a placement group that requires {"GPU": 2}: 1 GPU is already reserved."
    pg_two = placement_group([{"CPU": 1}, {"GPU": 2}])
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(pg_two.ready(), timeout=5)  # "The placement group cannot be created"
    remove_placement_group(pg_two)

    @ray.remote(num_cpus=1)
    class Actor:
        def __init__(self):
            pass

        def ready(self):
            pass

    # "Schedule an actor to the placement group ... it must fit in a bundle."
    actor = Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg)).remote()
    ray.get(actor.ready.remote(), timeout=10)

    # "Create a GPU actor on the first bundle of index 0."
    actor2 = Actor.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=0),
        num_cpus=0, num_gpus=1).remote()
    ray.get(actor2.ready.remote(), timeout=10)

    # "This API is asynchronous": removing it kills the actors in it and gives the resources back.
    remove_placement_group(pg)
    assert placement_group_table(pg)["state"] == "REMOVED"
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.ready.remote(), timeout=10)


def test_strict_spread_on_one_node_is_never_created(two_cpus_two_gpus):
    # "STRICT_SPREAD ... won't be created because there's only one node."
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(pg.ready(), timeout=2)
    remove_placement_group(pg)
    # "STRICT_PACK" (all on one node) fits.
    pg = placement_group([{"CPU": 1}, {"GPU": 1}], strategy="STRICT_PACK")
    ray.get(pg.ready(), timeout=10)
    remove_placement_group(pg)


def test_named_and_detached_group(two_cpus_two_gpus):
    # "Create a placement group with a unique name within a namespace ... lifetime=detached."
    pg = placement_group([{"CPU": 1}], name="global_name", lifetime="detached")
    ray.get(pg.ready(), timeout=10)
    # "Retrieve the placement group later somewhere."
    same = get_placement_group("global_name")
    assert same == pg
    assert same.bundle_specs == [{"CPU": 1.0}]
    remove_placement_group(same)
    with pytest.raises(ValueError):
        get_placement_group("global_name")  # removed: a name is no longer found


def test_tasks_in_a_group(two_cpus_two_gpus):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="PACK")
    ray.get(pg.ready(), timeout=10)

    @ray.remote(num_cpus=1)
    def f():
        return 1

    # Ray's older spelling works too.
    assert ray.get([f.options(placement_group=pg, placement_group_bundle_index=i).remote() for i in (0, 1)],
                   timeout=10) == [1, 1]
    assert ray.get(f.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg)).remote(), timeout=10) == 1
    remove_placement_group(pg)


def test_child_tasks_are_captured_into_the_group(two_cpus_two_gpus):
    # "Advanced: Child Tasks and Actors": with placement_group_capture_child_tasks=True
    # the tasks and actors a task in the group submits are scheduled in the group too.
    import time

    @ray.remote(num_cpus=1)
    def child():
        time.sleep(0.2)
        return True

    @ray.remote(num_cpus=1)
    def parent():
        return ray.get(child.remote(), timeout=20)

    @ray.remote(num_cpus=1)
    class Inner:
        def ok(self):
            return True

    @ray.remote(num_cpus=1)
    def parent_with_actor():
        a = Inner.remote()
        return ray.get(a.ok.remote(), timeout=20)

    pg = placement_group([{"CPU": 2}])  # every CPU of the cluster: nothing runs outside the group
    ray.get(pg.ready(), timeout=10)
    captured = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_capture_child_tasks=True)
    assert ray.get(parent.options(scheduling_strategy=captured).remote(), timeout=30) is True
    assert ray.get(parent_with_actor.options(scheduling_strategy=captured).remote(), timeout=30) is True
    # Without capture, the child asks for a CPU outside the group, where there is none.
    plain = PlacementGroupSchedulingStrategy(placement_group=pg)
    ref = parent.options(scheduling_strategy=plain).remote()
    ready, _ = ray.wait([ref], timeout=1.5)
    assert not ready
    ray.cancel(ref)
    remove_placement_group(pg)


def test_placement_group_table_of_every_group(two_cpus_two_gpus):
    # "ray.util.placement_group_table(): all placement group info", keyed by id.
    a = placement_group([{"CPU": 1}], name="first")
    b = placement_group([{"GPU": 1}], name="second")
    assert ray.get(a.ready(), timeout=10) == a  # the value of pg.ready() is the group, as in Ray
    ray.get(b.ready(), timeout=10)
    table = placement_group_table()
    assert table[a.id.hex()]["name"] == "first" and table[a.id.hex()]["state"] == "CREATED"
    assert table[b.id.hex()]["bundles"] == {0: {"GPU": 1.0}}
    remove_placement_group(a)
    assert placement_group_table()[a.id.hex()]["state"] == "REMOVED"
    remove_placement_group(b)
