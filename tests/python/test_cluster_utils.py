"""ray.cluster_utils.Cluster on phalanx: nodes added and removed on this machine, a driver connected to
it, work placed by node resources, a removed node's actor failing as on a lost machine, and the head the
driver uses refused for removal."""
import os

import pytest

import phalanx
from phalanx.cluster_utils import Cluster


@pytest.fixture
def cluster():
    phalanx.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    yield c
    c.shutdown()


def test_nodes_are_added_waited_for_connected_and_removed(cluster):
    worker = cluster.add_node(num_cpus=2, resources={"far": 1})
    cluster.wait_for_nodes()
    cluster.connect()
    assert len([n for n in phalanx.nodes() if n["Alive"]]) == 2
    assert phalanx.cluster_resources()["CPU"] == 3

    @phalanx.remote(resources={"far": 1})
    def where():
        return phalanx.get_runtime_context().get_node_id()

    assert phalanx.get(where.remote(), timeout=60) == worker.node_id

    @phalanx.remote(resources={"far": 1})
    class Far:
        def pid(self):
            return os.getpid()

    a = Far.remote()
    phalanx.get(a.pid.remote(), timeout=60)
    cluster.remove_node(worker)
    cluster.wait_for_nodes()
    assert len([n for n in phalanx.nodes() if n["Alive"]]) == 1
    with pytest.raises(phalanx.exceptions.RayActorError):
        phalanx.get(a.pid.remote(), timeout=60)
    assert cluster.list_all_nodes() == [cluster.head_node]


def test_removing_the_node_the_driver_uses_is_refused_with_rays_value_error(cluster):
    cluster.connect()
    with pytest.raises(ValueError, match="connected to this Ray client"):
        cluster.remove_node(cluster.head_node)
    assert cluster.head_node.all_processes_alive()
    assert phalanx.get(phalanx.put(1)) == 1


def test_a_node_killed_without_grace_is_declared_dead(cluster):
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    assert cluster.remaining_processes_alive()
    worker.kill_raylet()  # (a node's raylet gone: not every process remains)
    assert not cluster.remaining_processes_alive()
    cluster.remove_node(worker, allow_graceful=False)
    cluster.wait_for_nodes(timeout=30)  # (heartbeats: dead after 1.5 s)
    with pytest.raises(ValueError, match="unknown argument"):
        cluster.add_node(num_cpu=1)
