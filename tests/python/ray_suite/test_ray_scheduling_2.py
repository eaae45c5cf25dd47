"""Ray's `python/ray/tests/test_scheduling_2.py` (ray-project/ray, the version at 0859b582), its public parts:
scheduling strategies (DEFAULT, SPREAD, placement groups, node affinity) over several nodes, and data locality;
each test is named after Ray's and checks what it checks, through `import ray` only.

Changed, for public API only: the node a task ran on (Ray's `ray.worker.global_worker.current_node_id` and
`ray.get_runtime_context().node_id`) is `ray.get_runtime_context().get_node_id()`; the flags Ray's tasks and
the driver pass through `ray.experimental.internal_kv` are files in the test's tmp_path (every node runs on this
machine); `object_spilling_config` (Ray's fixture) is written here, its filesystem case. Ray's `_system_config`
knobs (`scheduler_spread_threshold` of test_default_scheduling_strategy and test_spread_scheduling_strategy, the
spilling knobs of test_data_locality_spilled_objects) are given to Ray only (`ray_only_system_config`): they
are not what those tests check. The tests run without Ray Client: `connect_to_client` is False only.
test_placement_group_scheduling_strategy leaves out its last check, that
`PlacementGroupSchedulingStrategy(placement_group=None)` is a ValueError: Ray 2.60 here no longer raises it.

Left out: the `connect_to_client=True` variants (Ray Client, `ray://`);
test_load_balancing_under_constrained_memory (64 s on Ray here: 200 objects of 40 MB, 8 GB, through a 4 GB
store; it also gives add_node `memory=`, which phalanx's cluster_utils lacks);
test_critical_object_store_mem_resource_utilization (what it checks is Ray's `scheduler_spread_threshold=0.0`
knob: with it Ray sends the task away from a node whose object store holds anything; phalanx has no such
threshold and runs it on the driver's node, as Ray does without the knob);
test_demand_report_for_node_affinity_scheduling_strategy and test_demand_report_when_scale_up (the autoscaler's
`AutoscalingCluster`, and the GCS's resource-usage protobufs through `make_global_state_accessor`)."""
import os
import sys
import time

import numpy as np
import pytest

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy
from suite_utils import phalanx_differs

ON_RAY = os.environ.get("RAY_SUITE_TARGET", "phalanx") == "ray"


def ray_only_system_config(config):
    """add_node's keywords for a Ray `_system_config` that phalanx lacks: given on Ray only."""
    return {"_system_config": config} if ON_RAY else {}


def node_id():
    """The node this process runs on (Ray's test: ray.worker.global_worker.current_node_id)."""
    return ray.get_runtime_context().get_node_id()


class FlagDir:
    """Flags set and read by tasks on any node of this machine and by the driver (Ray's test:
    ray.experimental.internal_kv's put/exists/del)."""

    def __init__(self, path):
        self.path = str(path)

    def put(self, key):
        with open(os.path.join(self.path, key), "w") as f:
            f.write(key)

    def exists(self, key):
        return os.path.exists(os.path.join(self.path, key))

    def delete(self, key):
        os.remove(os.path.join(self.path, key))


@pytest.fixture
def object_spilling_config(tmp_path):
    """Ray's fixture of this name, its filesystem case: (the config as Ray's JSON string, the folder)."""
    import json

    yield json.dumps({"type": "filesystem", "params": {"directory_path": str(tmp_path)}}), str(tmp_path)


@phalanx_differs("a task given scheduling_strategy=\"DEFAULT\" by an actor of a placement group that captures "
                 "its child tasks is still put into that group (here: on the worker node); in Ray an explicit "
                 "\"DEFAULT\" opts out of the capture and the task runs outside the group (on the head node)")
@pytest.mark.parametrize("connect_to_client", [False])
def test_default_scheduling_strategy(ray_start_cluster, connect_to_client):
    cluster = ray_start_cluster
    cluster.add_node(
        num_cpus=16,
        resources={"head": 1},
        **ray_only_system_config({"scheduler_spread_threshold": 1}),
    )
    cluster.add_node(num_cpus=8, num_gpus=8, resources={"worker": 1})
    cluster.wait_for_nodes()

    ray.init(address=cluster.address)
    pg = ray.util.placement_group(bundles=[{"CPU": 1, "GPU": 1}, {"CPU": 1, "GPU": 1}])
    ray.get(pg.ready())
    ray.get(pg.ready())

    @ray.remote(scheduling_strategy="DEFAULT")
    def get_node_id_1():
        return node_id()

    head_node_id = ray.get(get_node_id_1.options(resources={"head": 1}).remote())
    worker_node_id = ray.get(get_node_id_1.options(resources={"worker": 1}).remote())

    assert ray.get(get_node_id_1.remote()) == head_node_id

    @ray.remote(
        num_cpus=1,
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg),
    )
    def get_node_id_2():
        return node_id()

    assert ray.get(get_node_id_2.options(scheduling_strategy="DEFAULT").remote()) == head_node_id

    @ray.remote
    def get_node_id_3():
        return node_id()

    @ray.remote(
        num_cpus=1,
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_capture_child_tasks=True
        ),
    )
    class Actor1:
        def get_node_ids(self):
            return [
                node_id(),
                # Use parent's placement group
                ray.get(get_node_id_3.remote()),
                ray.get(get_node_id_3.options(scheduling_strategy="DEFAULT").remote()),
            ]

    actor1 = Actor1.remote()
    assert ray.get(actor1.get_node_ids.remote()) == [
        worker_node_id,
        worker_node_id,
        head_node_id,
    ]


@pytest.mark.parametrize("connect_to_client", [False])
def test_placement_group_scheduling_strategy(ray_start_cluster, connect_to_client):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=8, resources={"head": 1})
    cluster.add_node(num_cpus=8, num_gpus=8, resources={"worker": 1})
    cluster.wait_for_nodes()

    ray.init(address=cluster.address)
    pg = ray.util.placement_group(bundles=[{"CPU": 1, "GPU": 1}, {"CPU": 1, "GPU": 1}])
    ray.get(pg.ready())

    @ray.remote(scheduling_strategy="DEFAULT")
    def get_node_id_1():
        return node_id()

    worker_node_id = ray.get(get_node_id_1.options(resources={"worker": 1}).remote())

    assert (
        ray.get(
            get_node_id_1.options(
                num_cpus=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg),
            ).remote()
        )
        == worker_node_id
    )

    @ray.remote(
        num_cpus=1,
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg),
    )
    def get_node_id_2():
        return node_id()

    assert ray.get(get_node_id_2.remote()) == worker_node_id

    @ray.remote(
        num_cpus=1,
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg),
    )
    class Actor1:
        def get_node_id(self):
            return node_id()

    actor1 = Actor1.remote()
    assert ray.get(actor1.get_node_id.remote()) == worker_node_id

    @ray.remote
    class Actor2:
        def get_node_id(self):
            return node_id()

    actor2 = Actor2.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg)
    ).remote()
    assert ray.get(actor2.get_node_id.remote()) == worker_node_id

    with pytest.raises(ValueError):

        @ray.remote(scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg))
        def func():
            return 0

        func.options(placement_group=pg).remote()

    with pytest.raises(ValueError):

        @ray.remote
        def func():
            return 0

        func.options(scheduling_strategy="XXX").remote()


@phalanx_differs("phalanx has no ray.NodeID (Ray's ID class, from_random()); and a task with hard node affinity "
                 "to a node that does not exist fails with InfeasibleError after 5 s (an actor: ActorDiedError), one "
                 "whose node lacks its resources waits the 60 s infeasible timeout and then raises InfeasibleError, "
                 "where Ray raises TaskUnschedulableError / ActorUnschedulableError at once")
@pytest.mark.parametrize("connect_to_client", [False])
def test_node_affinity_scheduling_strategy(ray_start_cluster, connect_to_client, tmp_path):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=8, resources={"head": 1})
    ray.init(address=cluster.address)
    cluster.add_node(num_cpus=8, resources={"worker": 1})
    cluster.wait_for_nodes()
    flags = FlagDir(tmp_path)

    @ray.remote
    def get_node_id():
        return ray.get_runtime_context().get_node_id()

    head_node_id = ray.get(get_node_id.options(num_cpus=0, resources={"head": 1}).remote())
    worker_node_id = ray.get(get_node_id.options(num_cpus=0, resources={"worker": 1}).remote())

    assert worker_node_id == ray.get(
        get_node_id.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(worker_node_id, soft=False)
        ).remote()
    )
    assert head_node_id == ray.get(
        get_node_id.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(head_node_id, soft=False)
        ).remote()
    )

    # Doesn't fail when the node doesn't exist since soft is true.
    ray.get(
        get_node_id.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.NodeID.from_random().hex(), soft=True
            )
        ).remote()
    )

    # Doesn't fail when the node is infeasible since soft is true.
    assert worker_node_id == ray.get(
        get_node_id.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(head_node_id, soft=True),
            resources={"worker": 1},
        ).remote()
    )

    # Fail when the node doesn't exist.
    with pytest.raises(ray.exceptions.TaskUnschedulableError):
        ray.get(
            get_node_id.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(
                    ray.NodeID.from_random().hex(), soft=False
                )
            ).remote()
        )

    # Fail when the node is infeasible.
    with pytest.raises(ray.exceptions.TaskUnschedulableError):
        ray.get(
            get_node_id.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(head_node_id, soft=False),
                resources={"not_exist": 1},
            ).remote()
        )

    crashed_worker_node = cluster.add_node(num_cpus=8, resources={"crashed_worker": 1})
    cluster.wait_for_nodes()
    crashed_worker_node_id = ray.get(
        get_node_id.options(num_cpus=0, resources={"crashed_worker": 1}).remote()
    )

    @ray.remote(
        max_retries=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(crashed_worker_node_id, soft=True),
    )
    def crashed_get_node_id():
        if ray.get_runtime_context().get_node_id() == crashed_worker_node_id:
            flags.put("crashed_get_node_id")
            while True:
                time.sleep(1)
        else:
            return ray.get_runtime_context().get_node_id()

    r = crashed_get_node_id.remote()
    while not flags.exists("crashed_get_node_id"):
        time.sleep(0.1)
    cluster.remove_node(crashed_worker_node, allow_graceful=False)
    assert ray.get(r) in {head_node_id, worker_node_id}

    @ray.remote(num_cpus=1)
    class Actor:
        def get_node_id(self):
            return ray.get_runtime_context().get_node_id()

    actor = Actor.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(worker_node_id, soft=False)
    ).remote()
    assert worker_node_id == ray.get(actor.get_node_id.remote())

    actor = Actor.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(head_node_id, soft=False)
    ).remote()
    assert head_node_id == ray.get(actor.get_node_id.remote())

    # Wait until the target node becomes available.
    worker_actor = Actor.options(resources={"worker": 1}).remote()
    assert worker_node_id == ray.get(worker_actor.get_node_id.remote())
    actor = Actor.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(worker_node_id, soft=True),
        resources={"worker": 1},
    ).remote()
    del worker_actor
    assert worker_node_id == ray.get(actor.get_node_id.remote())

    # Doesn't fail when the node doesn't exist since soft is true.
    actor = Actor.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray.NodeID.from_random().hex(), soft=True)
    ).remote()
    assert ray.get(actor.get_node_id.remote())

    # Doesn't fail when the node is infeasible since soft is true.
    actor = Actor.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(head_node_id, soft=True),
        resources={"worker": 1},
    ).remote()
    assert worker_node_id == ray.get(actor.get_node_id.remote())

    # Fail when the node doesn't exist.
    with pytest.raises(ray.exceptions.ActorUnschedulableError):
        actor = Actor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.NodeID.from_random().hex(), soft=False
            )
        ).remote()
        ray.get(actor.get_node_id.remote())

    # Fail when the node is infeasible.
    with pytest.raises(ray.exceptions.ActorUnschedulableError):
        actor = Actor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(worker_node_id, soft=False),
            resources={"not_exist": 1},
        ).remote()
        ray.get(actor.get_node_id.remote())


@phalanx_differs("SPREAD is a round robin over every node, the submitting 0-CPU head included, whatever they can "
                 "run or already run: the two SPREAD tasks can land on the same worker node and the 8 SPREAD "
                 "actors split 5/3 or so over the two workers; Ray's SPREAD picks the least-loaded feasible node, "
                 "so the tasks go one to each worker and the actors 4 and 4")
@pytest.mark.parametrize("connect_to_client", [False])
def test_spread_scheduling_strategy(ray_start_cluster, connect_to_client, tmp_path):
    cluster = ray_start_cluster
    # Create a head node
    cluster.add_node(
        num_cpus=0,
        **ray_only_system_config({
            "scheduler_spread_threshold": 1,
        }),
    )
    ray.init(address=cluster.address)
    for i in range(2):
        cluster.add_node(num_cpus=8, resources={f"foo:{i}": 1})
    cluster.wait_for_nodes()
    flags = FlagDir(tmp_path)

    @ray.remote
    def get_node_id():
        return ray.get_runtime_context().get_node_id()

    worker_node_ids = {
        ray.get(get_node_id.options(resources={f"foo:{i}": 1}).remote()) for i in range(2)
    }
    # Wait for updating driver raylet's resource view.
    time.sleep(5)

    @ray.remote(scheduling_strategy="SPREAD")
    def task1():
        flags.put("test_task1")
        while flags.exists("test_task1"):
            time.sleep(0.1)
        return ray.get_runtime_context().get_node_id()

    @ray.remote
    def task2():
        flags.put("test_task2")
        return ray.get_runtime_context().get_node_id()

    locations = []
    locations.append(task1.remote())
    while not flags.exists("test_task1"):
        time.sleep(0.1)
    # Wait for updating driver raylet's resource view.
    time.sleep(5)
    locations.append(task2.options(scheduling_strategy="SPREAD").remote())
    while not flags.exists("test_task2"):
        time.sleep(0.1)
    flags.delete("test_task1")
    flags.delete("test_task2")
    assert set(ray.get(locations)) == worker_node_ids

    # Wait for updating driver raylet's resource view.
    time.sleep(5)

    # Make sure actors can be spreaded as well.
    @ray.remote(num_cpus=1)
    class Actor:
        def ping(self):
            return ray.get_runtime_context().get_node_id()

    actors = []
    locations = []
    for i in range(8):
        actors.append(Actor.options(scheduling_strategy="SPREAD").remote())
        locations.append(ray.get(actors[-1].ping.remote()))
    locations.sort()
    expected_locations = list(worker_node_ids) * 4
    expected_locations.sort()
    assert locations == expected_locations


@phalanx_differs("no locality-aware placement: check_locality (no resources of its own) runs on the submitting "
                 "head node, not on the node that made and holds its 50 MiB argument, as Ray's does")
def test_data_locality_spilled_objects(ray_start_cluster_enabled, object_spilling_config):
    cluster = ray_start_cluster_enabled
    object_spilling_config, _ = object_spilling_config
    cluster.add_node(
        num_cpus=1,
        object_store_memory=100 * 1024 * 1024,
        **ray_only_system_config({
            "min_spilling_size": 1,
            "object_spilling_config": object_spilling_config,
        }),
    )
    ray.init(cluster.address)
    cluster.add_node(num_cpus=1, object_store_memory=100 * 1024 * 1024, resources={"remote": 1})

    @ray.remote(resources={"remote": 1})
    def f():
        return (
            np.zeros(50 * 1024 * 1024, dtype=np.uint8),
            ray.runtime_context.get_runtime_context().get_node_id(),
        )

    @ray.remote
    def check_locality(x):
        _, node_id = x
        assert node_id == ray.runtime_context.get_runtime_context().get_node_id()

    # Check locality works when dependent task is already submitted by the time
    # the upstream task finishes.
    for _ in range(5):
        ray.get(check_locality.remote(f.remote()))

    # Check locality works when some objects were spilled.
    xs = [f.remote() for _ in range(5)]
    ray.wait(xs, num_returns=len(xs), fetch_local=False)
    for i, x in enumerate(xs):
        task = check_locality.remote(x)
        print(i, x, task)
        ray.get(task)


if __name__ == "__main__":
    sys.exit(pytest.main(["-v", __file__]))
