"""Placement groups as Ray's `python/ray/tests/test_placement_group_5.py` checks them (ray-project/ray): actors
with and without resources in a bundle stay on its node, a task's assigned resources name no bundle, bundles
placed by bin packing, groups made in parallel by tasks, STRICT_PACK with a soft target node; each test is named
after the Ray test it follows and checks what it checks.

Changed, for `import ray` only: Ray runs several of these tests twice, directly and through Ray Client
(`connect_to_client`, `ray.util.client.ray_client_helpers.connect_to_client_or_not`, a test helper that starts a
client server inside the test); here they run directly only. The node of an actor (Ray's
`ray._private.state.actors()[id]["Address"]["NodeID"]`) is asked of the actor itself
(`get_runtime_context().get_node_id()`, a `node_id` method added to the test's actors: `ray.util.state` needs Ray's
dashboard, not started here); `placement_group_assert_no_leak` is written with public calls
(test_ray_placement_group_2.py), as Ray's; `are_pairwise_unique` (Ray's test_placement_group.py) is written below.
`test_task_using_pg_observability` checks the assigned resources only: its second half reads `ray status` through
click's CliRunner on `ray.scripts.scripts` (Ray's CLI module, its autoscaler's status report). Smaller counts where
a loop only repeats: `test_placement_group_no_resource` 3 rounds instead of 10, `test_pg_no_resource_bundle_index` 5
actors instead of 10, `test_placement_group_parallel_submission` 10 managing tasks instead of 20 (its node has one
CPU, so the groups, each of one CPU, are made one after another: 20 took Ray over its 50 s here).

Left out: `test_placement_group_max_cpu_frac`, `test_placement_group_max_cpu_frac_multiple_pgs`,
`test_placement_group_max_cpu_frac_edge_cases` (`_max_cpu_fraction_per_node`, gone from Ray's placement_group
here: fail on Ray); `test_placement_group_leaks` (a `RuntimeEnvPlugin` of `ray._private.runtime_env.plugin`,
registered with Ray's `set_runtime_env_plugins` fixture, and `_system_config`)."""
from functools import reduce
from itertools import chain

import pytest

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from ray_suite.test_ray_placement_group_2 import placement_group_assert_no_leak
from suite_utils import phalanx_differs, wait_for_condition


def are_pairwise_unique(g):
    s = set()
    for x in g:
        if x in s:
            return False
        s.add(x)
    return True


def actor_node_id(actor):
    return ray.get(actor.node_id.remote())


def test_placement_group_no_resource(ray_start_cluster):
    @ray.remote(num_cpus=1)
    class Actor(object):
        def __init__(self):
            self.n = 0

        def value(self):
            return self.n

        def node_id(self):
            return ray.get_runtime_context().get_node_id()

    @ray.remote(num_cpus=0)
    class PhantomActor(object):
        def __init__(self):
            self.n = 0

        def value(self):
            return self.n

        def node_id(self):
            return ray.get_runtime_context().get_node_id()

    cluster = ray_start_cluster
    num_nodes = 2
    for _ in range(num_nodes):
        cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address)

    for _ in range(3):
        pg1 = ray.util.placement_group(name="pg1", bundles=[{"CPU": 2}])
        pg2 = ray.util.placement_group(name="pg2", bundles=[{"CPU": 2}])
        ray.get(pg1.ready())
        ray.get(pg2.ready())
        actor_11 = Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg1, placement_group_bundle_index=0)).remote()
        actor_12 = Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg1, placement_group_bundle_index=0)).remote()
        actor_13 = PhantomActor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg1, placement_group_bundle_index=0)).remote()
        actor_21 = Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg2, placement_group_bundle_index=0)).remote()
        actor_22 = Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg2, placement_group_bundle_index=0)).remote()
        actor_23 = PhantomActor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg2, placement_group_bundle_index=0)).remote()

        first_node = [actor_11, actor_12, actor_13]
        second_node = [actor_21, actor_22, actor_23]

        for actor in chain(first_node, second_node):
            ray.get(actor.value.remote())

        first_node_ids = [actor_node_id(actor) for actor in first_node]
        second_node_ids = [actor_node_id(actor) for actor in second_node]

        def check_eq(ip1, ip2):
            assert ip1 == ip2
            return ip1

        assert reduce(check_eq, first_node_ids) != reduce(check_eq, second_node_ids)

        placement_group_assert_no_leak([pg1, pg2])


def test_pg_no_resource_bundle_index(ray_start_cluster):
    @ray.remote(num_cpus=0)
    class Actor:
        def node_id(self):
            return ray.get_runtime_context().get_node_id()

    cluster = ray_start_cluster
    num_nodes = 4
    for _ in range(num_nodes):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)

    pg = ray.util.placement_group(bundles=[{"CPU": 1} for _ in range(num_nodes)])
    ray.get(pg.ready())
    first_bundle_node_id = ray.util.placement_group_table(pg)["bundles_to_node_id"][0]

    # Iterate 5 times to make sure it is not flaky.
    for _ in range(5):
        actor = Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=0)).remote()

        assert first_bundle_node_id == ray.get(actor.node_id.remote())

    placement_group_assert_no_leak([pg])


# Make sure the task observability API outputs don't contain
# pg related data.
def test_task_using_pg_observability(ray_start_cluster):
    @ray.remote(num_cpus=1)
    class Actor:
        def get_assigned_resources(self):
            return ray.get_runtime_context().get_assigned_resources()

    cluster = ray_start_cluster
    num_nodes = 1
    for _ in range(num_nodes):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)

    pg = ray.util.placement_group(bundles=[{"CPU": 1} for _ in range(num_nodes)])

    # Make sure get_assigned_id doesn't contain formatted resources.
    bundle_index = 0
    actor1 = Actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=bundle_index)).remote()
    r = ray.get(actor1.get_assigned_resources.remote())
    assert "bundle_group" not in r
    assert f"bundle_group_{bundle_index}" not in r


@pytest.mark.parametrize("scheduling_strategy", ["SPREAD", "STRICT_SPREAD", "PACK"])
def test_placement_group_bin_packing_priority(ray_start_cluster, scheduling_strategy):
    @ray.remote
    class Actor(object):
        def __init__(self):
            self.n = 0

        def value(self):
            return self.n

        def node_id(self):
            return ray.get_runtime_context().get_node_id()

    def index_to_actor(pg, index):
        if index < 2:
            return Actor.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=index),
                num_cpus=1,
            ).remote()
        else:
            return Actor.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=index),
                num_gpus=1,
            ).remote()

    def add_nodes_to_cluster(cluster):
        cluster.add_node(num_cpus=1)
        cluster.add_node(num_cpus=2)
        cluster.add_node(num_gpus=1)

    default_bundles = [
        {"CPU": 1},
        {"CPU": 2},
        {"CPU": 1, "GPU": 1},
    ]

    default_num_nodes = len(default_bundles)
    cluster = ray_start_cluster
    add_nodes_to_cluster(cluster)
    ray.init(address=cluster.address)

    placement_group = ray.util.placement_group(name="name", strategy=scheduling_strategy, bundles=default_bundles)
    ray.get(placement_group.ready())

    actors = [index_to_actor(placement_group, i) for i in range(default_num_nodes)]

    [ray.get(actor.value.remote()) for actor in actors]

    # Make sure all actors in counter_list are located in separate nodes.
    assert are_pairwise_unique([actor_node_id(actor) for actor in actors])


@pytest.mark.parametrize("scheduling_strategy", ["SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK"])
def test_placement_group_parallel_submission(ray_start_cluster, scheduling_strategy):
    @ray.remote(resources={"custom_resource": 1})
    def task(input):
        return input

    @ray.remote(num_cpus=0)
    def manage_tasks(input):
        pg = ray.util.placement_group([{"custom_resource": 1, "CPU": 1}], strategy=scheduling_strategy)
        ray.get(pg.ready())
        pg_strategy = ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy(placement_group=pg)

        obj_ref = task.options(scheduling_strategy=pg_strategy).remote(input)
        ray.get(obj_ref)

        ray.util.remove_placement_group(pg)
        return "OK"

    cluster = ray_start_cluster
    cluster.add_node(num_cpus=1, resources={"custom_resource": 20})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    # Test all tasks will not hang
    ray.get([manage_tasks.remote(i) for i in range(10)], timeout=50)


@phalanx_differs("phalanx has no ray.NodeID and its placement_group() takes no _soft_target_node_id")
def test_placement_group_strict_pack_soft_target_node_id(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=8, resources={"head": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    cluster.add_node(num_cpus=2, resources={"worker1": 1})
    worker2_node = cluster.add_node(num_cpus=4, resources={"worker2": 1})
    cluster.wait_for_nodes()

    @ray.remote
    def get_node_id():
        return ray.get_runtime_context().get_node_id()

    head_node_id = ray.get(get_node_id.options(resources={"head": 1}).remote())
    worker1_node_id = ray.get(get_node_id.options(resources={"worker1": 1}).remote())
    worker2_node_id = ray.get(get_node_id.options(resources={"worker2": 1}).remote())

    # soft_target_node_id only works with STRICT_PACK
    with pytest.raises(ValueError):
        pg = ray.util.placement_group(
            bundles=[{"CPU": 2}, {"CPU": 2}],
            strategy="PACK",
            _soft_target_node_id=ray.NodeID.from_random().hex(),
        )

    # Invalid target node id
    with pytest.raises(ValueError):
        pg = ray.util.placement_group(bundles=[{"CPU": 2}, {"CPU": 2}], strategy="PACK", _soft_target_node_id="a")

    # No target node.
    pg = ray.util.placement_group(bundles=[{"CPU": 2}, {"CPU": 2}], strategy="STRICT_PACK")
    wait_for_condition(lambda: ray.available_resources()["CPU"] == 10)
    assert (ray.get(get_node_id.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg)).remote()) == head_node_id)
    ray.util.remove_placement_group(pg)
    wait_for_condition(lambda: ray.available_resources()["CPU"] == 14)

    # Target node doesn't have enough available resources.
    pg = ray.util.placement_group(
        bundles=[{"CPU": 2}, {"CPU": 2}],
        strategy="STRICT_PACK",
        _soft_target_node_id=worker1_node_id,
    )
    wait_for_condition(lambda: ray.available_resources()["CPU"] == 10)
    assert (ray.get(get_node_id.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg)).remote()) == head_node_id)
    ray.util.remove_placement_group(pg)
    wait_for_condition(lambda: ray.available_resources()["CPU"] == 14)

    # Target node doesn't exist.
    pg = ray.util.placement_group(
        bundles=[{"CPU": 2}, {"CPU": 2}],
        strategy="STRICT_PACK",
        _soft_target_node_id=ray.NodeID.from_random().hex(),
    )
    wait_for_condition(lambda: ray.available_resources()["CPU"] == 10)
    assert (ray.get(get_node_id.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg)).remote()) == head_node_id)
    ray.util.remove_placement_group(pg)
    wait_for_condition(lambda: ray.available_resources()["CPU"] == 14)

    # Target node has enough available resources.
    pg = ray.util.placement_group(
        bundles=[{"CPU": 2}, {"CPU": 2}],
        strategy="STRICT_PACK",
        _soft_target_node_id=worker2_node_id,
    )
    wait_for_condition(lambda: ray.available_resources()["CPU"] == 10)
    assert (ray.get(get_node_id.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg)).remote()) == worker2_node_id)

    # After target node dies, the pg can be recovered elsewhere.
    cluster.remove_node(worker2_node)
    cluster.wait_for_nodes()
    assert (ray.get(get_node_id.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg)).remote()) == head_node_id)
