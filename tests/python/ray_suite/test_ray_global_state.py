"""Ray's `python/ray/tests/test_global_state.py` (ray-project/ray), its public part: what ray.cluster_resources(),
ray.available_resources() and ray.nodes() say of the cluster as tasks and actors use resources and nodes come
and go, and the nodes' names. Each test is named after Ray's and checks what it checks, through `import ray` only.

Changed, for public API only:
- test_total_resources_per_node: each live node's total resources are read from ray.nodes() (its "Resources"
  of the nodes "Alive"), keyed by node id, as Ray's `ray._private.state.total_resources_per_node()` returns them.
- test_node_name_cluster, test_node_name_init, test_no_node_name: the node names are read from ray.nodes()'s
  "NodeName" (Ray's read the GCS node table through `make_global_state_accessor(...).get_node_table()`, the same
  table ray.nodes() is made from). test_node_name_init and test_no_node_name take the `shutdown_only` fixture
  and start a cluster of their own (`address="local"`: Ray's call `ray.init()` bare, which on this shared
  machine could join a cluster already running).

Left out, as they read Ray's internals:
- test_available_resources_per_node: `ray._private.state.available_resources_per_node()` (no public API gives
  each node's available resources; ray.util.state needs the dashboard, not installed here).
- test_global_state_actor_table, test_global_state_actor_entry: `ray.util.state.list_actors/get_actor`, served
  by the dashboard's state API server (Ray here is installed without the dashboard).
- test_global_state_worker_table: `ray._private.state.workers()`.
- test_load_report, test_placement_group_load_report, test_backlog_report, test_default_load_reports,
  test_heartbeat_ip: the GCS's resource usage protobufs (`make_global_state_accessor`, gcs_utils), and Ray's
  `_system_config` knobs.
- test_next_job_id: `ray._private.state.next_job_id()`.
- test_get_cluster_config, test_get_max_cpus_from_cluster_config, test_get_max_resources_from_cluster_config,
  test_get_draining_nodes: `ray._raylet.GcsClient`, `ray.core.generated.autoscaler_pb2` and
  `ray._private.state.state` (the autoscaler's cluster config and node draining)."""
import sys

import pytest

import ray
from suite_utils import phalanx_differs, wait_for_condition


def total_resources_per_node():
    """Each live node's total resources, by node id (hex): Ray's ray._private.state.total_resources_per_node(),
    from ray.nodes()."""
    return {node["NodeID"]: node["Resources"] for node in ray.nodes() if node["Alive"]}


def test_replenish_resources(ray_start_regular):
    cluster_resources = ray.cluster_resources()
    available_resources = ray.available_resources()
    assert cluster_resources == available_resources

    @ray.remote
    def cpu_task():
        pass

    ray.get(cpu_task.remote())

    wait_for_condition(lambda: ray.available_resources() == cluster_resources)


def test_uses_resources(ray_start_regular):
    cluster_resources = ray.cluster_resources()

    @ray.remote(num_cpus=1)
    class Actor:
        pass

    actor = Actor.remote()
    ray.get(actor.__ray_ready__.remote())

    wait_for_condition(
        lambda: ray.available_resources().get("CPU", 0)
        == cluster_resources.get("CPU", 0) - 1
    )


def test_total_resources_per_node(ray_start_cluster_head):
    cluster = ray_start_cluster_head

    @ray.remote
    def get_node_id():
        return ray.get_runtime_context().get_node_id()

    head_node_id = ray.get(get_node_id.remote())

    worker_node = cluster.add_node(num_cpus=3, resources={"worker": 1})

    @ray.remote(num_cpus=1, resources={"worker": 1})
    class Actor:
        def ping(self):
            return ray.get_runtime_context().get_node_id()

    actor = Actor.remote()
    worker_node_id = ray.get(actor.ping.remote())

    def total_resources_per_node_check1():
        total_resources = total_resources_per_node()
        assert len(total_resources) == 2
        assert total_resources[head_node_id]["CPU"] == 1
        assert total_resources[worker_node_id]["CPU"] == 3
        assert total_resources[worker_node_id].get("worker", 0) == 1
        return True

    wait_for_condition(total_resources_per_node_check1)

    cluster.remove_node(worker_node)
    cluster.wait_for_nodes()

    def total_resources_per_node_check2():
        # Make sure worker node is not returned
        total_resources = total_resources_per_node()
        assert len(total_resources) == 1
        assert total_resources[head_node_id]["CPU"] == 1
        return True

    wait_for_condition(total_resources_per_node_check2)


def test_add_remove_cluster_resources(ray_start_cluster_head):
    """Tests that Global State API is consistent with actual cluster."""
    cluster = ray_start_cluster_head
    assert ray.cluster_resources()["CPU"] == 1
    nodes = []
    nodes += [cluster.add_node(num_cpus=1)]
    cluster.wait_for_nodes()
    assert ray.cluster_resources()["CPU"] == 2

    cluster.remove_node(nodes.pop())
    cluster.wait_for_nodes()
    assert ray.cluster_resources()["CPU"] == 1

    for i in range(5):
        nodes += [cluster.add_node(num_cpus=1)]
    cluster.wait_for_nodes()
    assert ray.cluster_resources()["CPU"] == 6


@phalanx_differs("init()'s address_info['node_id'] is the node id's bytes (Ray's: its hex), so the test takes "
                 "the head for the worker node")
def test_node_name_cluster(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(node_name="head_node", include_dashboard=False)
    head_context = ray.init(address=cluster.address, include_dashboard=False)
    cluster.add_node(node_name="worker_node", include_dashboard=False)
    cluster.wait_for_nodes()

    node_table = ray.nodes()
    assert len(node_table) == 2
    for node in node_table:
        if node["NodeID"] == head_context.address_info["node_id"]:
            assert node["NodeName"] == "head_node"
        else:
            assert node["NodeName"] == "worker_node"

    ray.shutdown()
    cluster.shutdown()


def test_node_name_init(shutdown_only):
    # Test ray.init with _node_name directly
    ray.init(address="local", _node_name="new_head_node", include_dashboard=False)

    node = ray.nodes()[0]
    assert node["NodeName"] == "new_head_node"
    ray.shutdown()


def test_no_node_name(shutdown_only):
    # Test that starting ray with no node name will result in a node_name=ip_address
    ray.init(address="local", include_dashboard=False)
    node = ray.nodes()[0]
    assert node["NodeName"] == ray.util.get_node_ip_address()
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(pytest.main(["-sv", __file__]))
