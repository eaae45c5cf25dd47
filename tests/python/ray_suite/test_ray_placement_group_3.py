"""Placement groups as Ray's `python/ray/tests/test_placement_group_3.py` checks them (ray-project/ray): groups
scheduled and removed at the same time, detached and named groups, synchronous registration, GPUs in bundles,
actors waiting on groups, a removal that leaks no bundle resource; each test is named after the Ray test it
follows and checks what it checks.

Changed, for `import ray` only: Ray runs several of these tests twice, directly and through Ray Client
(`connect_to_client`, `ray.util.client.ray_client_helpers.connect_to_client_or_not`, a test helper that starts a
client server inside the test); here they run directly only. In `test_detached_placement_group` the actors that
should be ALIVE (Ray counts them in `ray.state.actors()`; `ray.util.state` needs Ray's dashboard, not started here)
are given names and each is called, and both drivers use one namespace to find them;
`kill_actor_and_wait_for_failure` is `ray.kill` and waiting until the actor's calls raise RayActorError;
`is_placement_group_removed` (`ray._private.test_utils`) is `ray.util.placement_group_table(pg)["state"] ==
"REMOVED"`, as Ray's. The drivers of `test_detached_placement_group` and `test_named_placement_group` connect to
`cluster.address` (Ray's `ray.init()["redis_address"]`), and these tests do not first wait for `ray.state.jobs()` to
call that driver dead: what follows holds whether or not it has been.
`test_schedule_placement_groups_at_the_same_time` starts its cluster with the `shutdown_only` fixture (Ray's calls
`ray.init` without one). Smaller counts where a loop only repeats:
`test_actor_scheduling_not_block_with_placement_group` 50 groups and actors instead of 1000 and 3 nodes added one by
one instead of 20; `test_placement_group_local_resource_view` 10 CPU bundles instead of 30 and it connects to
`cluster.address` (Ray's `ray.init(address="auto")`, which on this shared machine could find another test's
cluster). `test_placement_group_local_resource_view` sets Ray's `RAY_raylet_report_resources_period_milliseconds`
and `RAY_grpc_based_resource_broadcast` (Ray's own knobs, which only slow Ray's resource reports) for Ray only.

Left out: `test_create_placement_group_during_gcs_server_restart` (Ray skips it); `test_placement_group_wait_api`
(`cluster.head_node.kill_gcs_server()` / `start_gcs_server()`, Ray's node process internals);
`test_placement_group_client_option_serialization` (`PlacementGroup.to_dict` / `from_dict`, Ray Client's
conversion, gone from Ray here: fails on Ray); `test_placement_group_status_no_bundle_demand`,
`test_placement_group_status` (the autoscaler's debug status read from Redis with `ray._private.services` and
`ray.autoscaler._private`)."""
import os
import time

import pytest

import ray
import ray.cluster_utils
from ray.exceptions import RaySystemError
from ray.util.placement_group import placement_group, remove_placement_group
from suite_utils import phalanx_differs, run_string_as_driver, wait_for_condition

ON_RAY = os.environ.get("RAY_SUITE_TARGET", "phalanx") == "ray"


def is_placement_group_removed(pg):
    return ray.util.placement_group_table(pg)["state"] == "REMOVED"


def kill_actor_and_wait_for_failure(actor, timeout=10):
    """Ray's test helper of this name, with public calls: kills the actor and waits until its calls fail."""
    ray.kill(actor)

    def dead():
        try:
            ray.get(actor.ready.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return True
        return False

    wait_for_condition(dead, timeout=timeout)


def test_schedule_placement_groups_at_the_same_time(shutdown_only, init_kwargs):
    ray.init(num_cpus=4, **init_kwargs)

    pgs = [placement_group([{"CPU": 2}]) for _ in range(6)]

    wait_pgs = {pg.ready(): pg for pg in pgs}

    def is_all_placement_group_removed():
        ready, _ = ray.wait(list(wait_pgs.keys()), timeout=0.5)
        if ready:
            ready_pg = wait_pgs[ready[0]]
            remove_placement_group(ready_pg)
            del wait_pgs[ready[0]]

        if len(wait_pgs) == 0:
            return True
        return False

    wait_for_condition(is_all_placement_group_removed)

    ray.shutdown()


def test_detached_placement_group(ray_start_cluster):
    cluster = ray_start_cluster
    for _ in range(2):
        cluster.add_node(num_cpus=3)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="default_test_namespace")

    # Make sure detached placement group will alive when job dead.
    driver_code = f"""
import ray

ray.init(address="{cluster.address}", namespace="default_test_namespace")

pg = ray.util.placement_group(
        [{{"CPU": 1}} for _ in range(2)],
        strategy="STRICT_SPREAD", lifetime="detached")
ray.get(pg.ready())

@ray.remote(num_cpus=1)
class Actor:
    def ready(self):
        return True

for bundle_index in range(2):
    actor = Actor.options(lifetime="detached", placement_group=pg,
                placement_group_bundle_index=bundle_index, name=f"driver_actor_{{bundle_index}}").remote()
    ray.get(actor.ready.remote())

ray.shutdown()
    """

    run_string_as_driver(driver_code)

    def assert_alive_num_pg(expected_num_pg):
        alive_num_pg = 0
        for _, placement_group_info in ray.util.placement_group_table().items():
            if placement_group_info["state"] == "CREATED":
                alive_num_pg += 1
        return alive_num_pg == expected_num_pg

    def assert_alive_actors(names):
        # Ray's test counts the ALIVE actors (ray.state.actors()); these are named and each asked.
        return all(ray.get([ray.get_actor(name).ready.remote() for name in names], timeout=30))

    assert assert_alive_num_pg(1)
    assert assert_alive_actors(["driver_actor_0", "driver_actor_1"])

    # Make sure detached placement group will alive when its creator which
    # is detached actor dead.
    # Test actors first.
    @ray.remote(num_cpus=1)
    class NestedActor:
        def ready(self):
            return True

    @ray.remote(num_cpus=1)
    class Actor:
        def __init__(self):
            self.actors = []

        def ready(self):
            return True

        def schedule_nested_actor_with_detached_pg(self):
            # Create placement group which is detached.
            pg = ray.util.placement_group(
                [{"CPU": 1} for _ in range(2)], strategy="STRICT_SPREAD", lifetime="detached", name="detached_pg")
            ray.get(pg.ready())
            # Schedule nested actor with the placement group.
            for bundle_index in range(2):
                actor = NestedActor.options(
                    placement_group=pg, placement_group_bundle_index=bundle_index, lifetime="detached",
                    name=f"nested_actor_{bundle_index}").remote()
                ray.get(actor.ready.remote())
                self.actors.append(actor)

    a = Actor.options(lifetime="detached").remote()
    ray.get(a.ready.remote())
    # 1 parent actor and 2 children actor.
    ray.get(a.schedule_nested_actor_with_detached_pg.remote())

    # Kill an actor and wait until it is killed.
    kill_actor_and_wait_for_failure(a)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.ready.remote())

    # We should have 2 alive pgs and 4 alive actors.
    assert assert_alive_num_pg(2)
    assert assert_alive_actors(["driver_actor_0", "driver_actor_1", "nested_actor_0", "nested_actor_1"])


def test_named_placement_group(ray_start_cluster):
    cluster = ray_start_cluster
    for _ in range(2):
        cluster.add_node(num_cpus=3)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="default_test_namespace")
    global_placement_group_name = "named_placement_group"

    # Create a detached placement group with name.
    driver_code = f"""
import ray

ray.init(address="{cluster.address}", namespace="default_test_namespace")

pg = ray.util.placement_group(
        [{{"CPU": 1}} for _ in range(2)],
        strategy="STRICT_SPREAD",
        name="{global_placement_group_name}",
        lifetime="detached")
ray.get(pg.ready())

ray.shutdown()
    """

    run_string_as_driver(driver_code)

    @ray.remote(num_cpus=1)
    class Actor:
        def ping(self):
            return "pong"

    # Get the named placement group and schedule a actor.
    placement_group = ray.util.get_placement_group(global_placement_group_name)
    assert placement_group is not None
    assert placement_group.wait(5)
    actor = Actor.options(placement_group=placement_group, placement_group_bundle_index=0).remote()

    ray.get(actor.ping.remote())

    # Create another placement group and make sure its creation will failed.
    error_creation_count = 0
    try:
        ray.util.placement_group(
            [{"CPU": 1} for _ in range(2)], strategy="STRICT_SPREAD", name=global_placement_group_name)
    except RaySystemError:
        error_creation_count += 1
    assert error_creation_count == 1

    # Remove a named placement group and make sure the second creation
    # will successful.
    ray.util.remove_placement_group(placement_group)
    same_name_pg = ray.util.placement_group(
        [{"CPU": 1} for _ in range(2)], strategy="STRICT_SPREAD", name=global_placement_group_name)
    assert same_name_pg.wait(10)

    # Get a named placement group with a name that doesn't exist
    # and make sure it will raise ValueError correctly.
    error_count = 0
    try:
        ray.util.get_placement_group("inexistent_pg")
    except ValueError:
        error_count = error_count + 1
    assert error_count == 1


def test_placement_group_synchronous_registration(ray_start_cluster):
    cluster = ray_start_cluster
    # One node which only has one CPU.
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    # Create a placement group that has two bundles and `STRICT_PACK`
    # strategy so its registration will successful but scheduling failed.
    placement_group = ray.util.placement_group(
        name="name",
        strategy="STRICT_PACK",
        bundles=[{
            "CPU": 1,
        }, {
            "CPU": 1
        }])
    # Make sure we can properly remove it immediately
    # as its registration is synchronous.
    ray.util.remove_placement_group(placement_group)

    wait_for_condition(lambda: is_placement_group_removed(placement_group))


def test_placement_group_gpu_set(ray_start_cluster):
    cluster = ray_start_cluster
    # One node which only has one CPU.
    cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    placement_group = ray.util.placement_group(
        name="name",
        strategy="PACK",
        bundles=[{
            "CPU": 1,
            "GPU": 1
        }, {
            "CPU": 1,
            "GPU": 1
        }])

    @ray.remote(num_gpus=1)
    def get_gpus():
        return ray.get_gpu_ids()

    result = get_gpus.options(placement_group=placement_group, placement_group_bundle_index=0).remote()
    result = ray.get(result)
    assert result == [0]

    result = get_gpus.options(placement_group=placement_group, placement_group_bundle_index=1).remote()
    result = ray.get(result)
    assert result == [0]


@phalanx_differs("a bundle's GPUs are not given GPU ids when the bundle is reserved: a task in each of two {'GPU': 1} "
                 "groups, one after the other, both get CUDA_VISIBLE_DEVICES '0' (Ray pins GPU 0 to one bundle, "
                 "GPU 1 to the other)")
def test_placement_group_gpu_assigned(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_gpus=2)
    ray.init(address=cluster.address)
    gpu_ids_res = set()

    @ray.remote(num_gpus=1, num_cpus=0)
    def f():
        import os
        return os.environ["CUDA_VISIBLE_DEVICES"]

    pg1 = ray.util.placement_group([{"GPU": 1}])
    pg2 = ray.util.placement_group([{"GPU": 1}])

    assert pg1.wait(10)
    assert pg2.wait(10)

    gpu_ids_res.add(ray.get(f.options(placement_group=pg1).remote()))
    gpu_ids_res.add(ray.get(f.options(placement_group=pg2).remote()))

    assert len(gpu_ids_res) == 2


def test_actor_scheduling_not_block_with_placement_group(ray_start_cluster):
    """Tests the scheduling of lots of actors will not be blocked
       when using placement groups.

       For more detailed information please refer to:
       https://github.com/ray-project/ray/issues/15801.
    """

    cluster = ray_start_cluster
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)

    @ray.remote
    class A:
        def ready(self):
            pass

    actor_num = 50
    pgs = [ray.util.placement_group([{"CPU": 1}]) for _ in range(actor_num)]
    actors = [A.options(placement_group=pg).remote() for pg in pgs]
    refs = [actor.ready.remote() for actor in actors]

    expected_created_num = 1

    def is_actor_created_number_correct():
        ready, not_ready = ray.wait(refs, num_returns=len(refs), timeout=1)
        return len(ready) == expected_created_num

    def is_pg_created_number_correct():
        created_pgs = [pg for _, pg in ray.util.placement_group_table().items() if pg["state"] == "CREATED"]
        return len(created_pgs) == expected_created_num

    wait_for_condition(is_pg_created_number_correct, timeout=3)
    wait_for_condition(is_actor_created_number_correct, timeout=30, retry_interval_ms=0)

    # NOTE: we don't need to test all the actors create successfully.
    for _ in range(3):
        expected_created_num += 1
        cluster.add_node(num_cpus=1)

        wait_for_condition(is_pg_created_number_correct, timeout=10)
        # Make sure the node add event will cause a waiting actor
        # to create successfully in time.
        wait_for_condition(is_actor_created_number_correct, timeout=30, retry_interval_ms=0)


def test_placement_group_gpu_unique_assigned(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_gpus=4, num_cpus=4)
    ray.init(address=cluster.address)
    gpu_ids_res = set()

    # Create placement group with 4 bundles using 1 GPU each.
    num_gpus = 4
    bundles = [{"GPU": 1, "CPU": 1} for _ in range(num_gpus)]
    pg = placement_group(bundles)
    ray.get(pg.ready())

    # Actor using 1 GPU that has a method to get
    #  $CUDA_VISIBLE_DEVICES env variable.
    @ray.remote(num_gpus=1, num_cpus=1)
    class Actor:
        def get_gpu(self):
            import os
            return os.environ["CUDA_VISIBLE_DEVICES"]

    # Create actors out of order.
    actors = []
    actors.append(Actor.options(placement_group=pg, placement_group_bundle_index=0).remote())
    actors.append(Actor.options(placement_group=pg, placement_group_bundle_index=3).remote())
    actors.append(Actor.options(placement_group=pg, placement_group_bundle_index=2).remote())
    actors.append(Actor.options(placement_group=pg, placement_group_bundle_index=1).remote())

    for actor in actors:
        gpu_ids = ray.get(actor.get_gpu.remote())
        assert len(gpu_ids) == 1
        gpu_ids_res.add(gpu_ids)

    assert len(gpu_ids_res) == 4


def test_placement_group_removal_leak_regression(ray_start_cluster):
    """Related issue:
        https://github.com/ray-project/ray/issues/19131
    """
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=5)
    ray.init(address=cluster.address)

    TOTAL_CPUS = 8
    bundles = [{"CPU": 1, "GPU": 1}]
    bundles += [{"CPU": 1} for _ in range(TOTAL_CPUS - 1)]

    pg = placement_group(bundles, strategy="PACK")
    # Here, we simulate that the ready task is queued and
    # the new node is up. As soon as the new node is up,
    # the ready task is scheduled.
    # See https://github.com/ray-project/ray/pull/19138
    # for more details about the test.
    o = pg.ready()
    # Add an artificial delay until the new node is up.
    time.sleep(3)
    cluster.add_node(num_cpus=5, num_gpus=1)
    ray.get(o)
    bundle_resource_name = f"bundle_group_{pg.id.hex()}"
    expected_bundle_wildcard_val = TOTAL_CPUS * 1000

    # This should fail if there's a leakage
    # because the bundle resources are never returned properly.
    def check_bundle_leaks():
        bundle_resources = ray.available_resources()[bundle_resource_name]
        return expected_bundle_wildcard_val == bundle_resources

    wait_for_condition(check_bundle_leaks)


def test_placement_group_local_resource_view(monkeypatch, ray_start_cluster):
    """Please refer to https://github.com/ray-project/ray/pull/19911
    for more details.
    """
    with monkeypatch.context() as m:
        # Increase broadcasting interval so that node resource will arrive
        # at raylet after local resource all being allocated.
        if ON_RAY:
            m.setenv("RAY_raylet_report_resources_period_milliseconds", "2000")
            m.setenv("RAY_grpc_based_resource_broadcast", "true")
        cluster = ray_start_cluster

        cluster.add_node(num_cpus=16, object_store_memory=1e9)
        cluster.wait_for_nodes()
        cluster.add_node(num_cpus=16, num_gpus=1)
        cluster.wait_for_nodes()
        NUM_CPU_BUNDLES = 10

        @ray.remote(num_cpus=1)
        class Worker(object):
            def __init__(self, i):
                self.i = i

            def work(self):
                time.sleep(0.1)
                print("work ", self.i)

        @ray.remote(num_cpus=1, num_gpus=1)
        class Trainer(object):
            def __init__(self, i):
                self.i = i

            def train(self):
                time.sleep(0.2)
                print("train ", self.i)

        ray.init(address=cluster.address)
        bundles = [{"CPU": 1, "GPU": 1}]
        bundles += [{"CPU": 1} for _ in range(NUM_CPU_BUNDLES)]
        pg = placement_group(bundles, strategy="PACK")
        ray.get(pg.ready())

        # Local resource will be allocated and here we are to ensure
        # local view is consistent and node resouce updates are discarded
        workers = [Worker.options(placement_group=pg).remote(i) for i in range(NUM_CPU_BUNDLES)]
        trainer = Trainer.options(placement_group=pg).remote(0)
        ray.get([workers[i].work.remote() for i in range(NUM_CPU_BUNDLES)])
        ray.get(trainer.train.remote())
