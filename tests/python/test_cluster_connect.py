"""Joining a running node by its GCS address, and what happens when there
is nothing to join."""
import pytest

import phalanx
from phalanx._private.node import NodeProcesses, free_port, new_session_dir

from conftest import wait_until


@pytest.fixture
def running_node():
    phalanx.shutdown()
    node = NodeProcesses(new_session_dir())
    try:
        redis = node.start_redis()
        node.start_raylet(redis, num_cpus=1)
        from phalanx._private.rpc_tables import alive_nodes
        wait_until(lambda: alive_nodes(redis), timeout=20, what="the raylet's record in the GCS")
        yield redis
    finally:
        phalanx.shutdown()
        node.stop()


def test_driver_joins_by_gcs_address_and_leaves_the_node_running(running_node):
    info = phalanx.init(address=running_node)
    assert info["gcs_address"] == running_node

    @phalanx.remote
    def hello(x):
        return f"hello {x}"
    assert phalanx.get(hello.remote("node")) == "hello node"
    phalanx.shutdown()
    # The node was not ours to stop: a second driver still gets work done.
    phalanx.init(address=running_node)
    assert phalanx.get(hello.remote("again")) == "hello again"


def test_node_table_lists_the_live_raylet(running_node):
    from phalanx._private.rpc_tables import alive_nodes
    host, port = running_node.split(":")
    nodes = alive_nodes(host, int(port))
    assert len(nodes) == 1
    assert nodes[0]["resources_total"]["CPU"] == 1.0
    assert nodes[0]["heartbeat_ms"] > 0


def test_unreachable_gcs_is_named():
    phalanx.shutdown()
    addr = f"127.0.0.1:{free_port()}"
    with pytest.raises(phalanx.UnavailableError, match=f"redis-server.*{addr}"):
        phalanx.init(address=addr)
    assert not phalanx.is_initialized()


def test_join_options_that_only_a_new_node_takes_are_rejected(running_node):
    with pytest.raises(ValueError, match="num_cpus"):
        phalanx.init(address=running_node, num_cpus=4)


def test_init_without_an_address_joins_the_cluster_the_environment_or_this_machine_names(running_node, monkeypatch,
                                                                                        tmp_path):
    """Ray's rule for init() with no address: RAY_ADDRESS (or PHALANX_ADDRESS), else the cluster started last
    on this machine (`phalanx start --head` records it; a dead one is passed over with a warning), else a new
    local cluster; address="local" always starts a new one."""
    monkeypatch.setenv("PHALANX_TMPDIR", str(tmp_path))  # (this test's own records: no head recorded)
    monkeypatch.setenv("RAY_ADDRESS", running_node)
    assert phalanx.init()["gcs_address"] == running_node
    phalanx.shutdown()
    with pytest.raises(ValueError, match="cannot be given when joining a cluster"):
        phalanx.init(num_cpus=1)  # (Ray: num_cpus is for a new node, not for joining one)
    monkeypatch.delenv("RAY_ADDRESS")

    from phalanx._private.cluster_records import cli_dir, head_file
    from phalanx._private.node import private_dir
    private_dir(cli_dir())
    with open(head_file(), "w") as f:
        f.write(running_node)
    assert phalanx.init()["gcs_address"] == running_node
    phalanx.shutdown()
    assert phalanx.init(address="local", num_cpus=1)["gcs_address"] != running_node
    phalanx.shutdown()

    with open(head_file(), "w") as f:
        f.write(f"127.0.0.1:{free_port()}")  # (a head that is gone)
    with pytest.warns(RuntimeWarning, match="does not answer: starting a new local cluster"):
        info = phalanx.init(num_cpus=1)
    assert info["gcs_address"] != running_node


def test_init_without_an_address_joins_a_cluster_utils_cluster_of_this_process():
    from phalanx.cluster_utils import Cluster
    phalanx.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        assert phalanx.init()["gcs_address"] == cluster.address
    finally:
        cluster.shutdown()
    assert phalanx.init(num_cpus=1)["gcs_address"] != cluster.address  # (gone: a new local cluster)
    phalanx.shutdown()
