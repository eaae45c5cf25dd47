"""ray.init, ray.shutdown and the cluster's resources, after Ray's python/ray/tests/test_ray_init.py,
test_ray_init_2.py, test_basic.py's resource tests and test_advanced_*'s cluster_resources checks: what a
driver sees of the cluster it starts, through `import ray` only."""
import sys

import pytest

import ray
from suite_utils import Gate


def test_is_initialized(shutdown_only):
    assert not ray.is_initialized()
    ray.init(num_cpus=1)
    assert ray.is_initialized()
    ray.shutdown()
    assert not ray.is_initialized()


def test_init_twice_raises_without_ignore_reinit_error(shutdown_only):
    ray.init(num_cpus=1)
    with pytest.raises(RuntimeError):
        ray.init(num_cpus=1)
    ray.init(num_cpus=1, ignore_reinit_error=True)  # no error, the same cluster
    assert ray.is_initialized()


def test_shutdown_then_init_again(shutdown_only):
    @ray.remote
    def f():
        return 1

    ray.init(num_cpus=1)
    assert ray.get(f.remote()) == 1
    ray.shutdown()
    ray.init(num_cpus=2)
    assert ray.get(f.remote()) == 1
    assert ray.cluster_resources()["CPU"] == 2


def test_shutdown_twice_is_harmless(shutdown_only):
    ray.init(num_cpus=1)
    ray.shutdown()
    ray.shutdown()
    assert not ray.is_initialized()


def test_init_num_cpus_is_the_cluster_cpus(shutdown_only):
    ray.init(num_cpus=3)
    assert ray.cluster_resources()["CPU"] == 3
    assert ray.available_resources()["CPU"] == 3


def test_init_custom_resources(shutdown_only):
    ray.init(num_cpus=1, resources={"Custom": 2, "Other": 1})
    res = ray.cluster_resources()
    assert res["Custom"] == 2
    assert res["Other"] == 1

    @ray.remote(resources={"Custom": 1})
    def uses_custom():
        return ray.get_runtime_context().get_assigned_resources().get("Custom")

    assert ray.get(uses_custom.remote(), timeout=30) == 1


def test_available_resources_while_a_task_runs(shutdown_only):
    ray.init(num_cpus=2)

    gate = Gate.remote()

    @ray.remote(num_cpus=1)
    def hold(g):
        import time
        while not ray.get(g.is_open.remote()):  # (suite_utils.Gate)
            time.sleep(0.01)

    ref = hold.remote(gate)
    import time
    deadline = time.monotonic() + 20
    while ray.available_resources().get("CPU", 0) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.available_resources().get("CPU", 0) == 1
    ray.get(gate.open.remote())
    ray.get(ref, timeout=20)
    deadline = time.monotonic() + 20
    while ray.available_resources().get("CPU", 0) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.available_resources()["CPU"] == 2


def test_nodes_lists_the_one_node(shutdown_only):
    ray.init(num_cpus=1)
    nodes = ray.nodes()
    assert len(nodes) == 1
    node = nodes[0]
    assert node["Alive"] is True
    assert node["Resources"]["CPU"] == 1
    assert node["NodeID"] == ray.get_runtime_context().get_node_id()


def test_init_returns_context_with_address(shutdown_only):
    info = ray.init(num_cpus=1)
    assert info["address"]
    assert info.address_info["address"] == info["address"]


def test_init_context_manager_shuts_down(shutdown_only):
    with ray.init(num_cpus=1):
        assert ray.is_initialized()
    assert not ray.is_initialized()


def test_init_namespace_must_be_a_string(shutdown_only):
    with pytest.raises(TypeError):
        ray.init(num_cpus=1, namespace=123)


def test_init_with_namespace(shutdown_only):
    ray.init(num_cpus=1, namespace="my-namespace")
    assert ray.get_runtime_context().namespace == "my-namespace"


def test_remote_call_without_init_starts_a_cluster(shutdown_only):
    """Ray's auto-init: the first remote call starts a local cluster."""
    @ray.remote
    def f():
        return 7

    assert not ray.is_initialized()
    assert ray.get(f.remote()) == 7
    assert ray.is_initialized()


def test_put_without_init_starts_a_cluster(shutdown_only):
    assert ray.get(ray.put("x")) == "x"
    assert ray.is_initialized()


def test_refs_of_a_shut_down_cluster_are_not_served_by_the_next(shutdown_only):
    ray.init(num_cpus=1)
    ref = ray.put(1)
    ray.shutdown()
    ray.init(num_cpus=1)
    with pytest.raises(Exception):
        ray.get(ref, timeout=5)


def test_zero_cpu_cluster_runs_zero_cpu_tasks(shutdown_only):
    ray.init(num_cpus=0)

    @ray.remote(num_cpus=0)
    def f():
        return 1

    assert ray.get(f.remote(), timeout=30) == 1


def test_task_wanting_more_cpus_than_the_cluster_stays_pending(shutdown_only):
    ray.init(num_cpus=1)

    @ray.remote(num_cpus=2)
    def big():
        return 1

    ref = big.remote()
    ready, _ = ray.wait([ref], timeout=1)
    assert not ready
    ray.cancel(ref)


if __name__ == "__main__":
    sys.exit(pytest.main(["-sv", __file__]))
