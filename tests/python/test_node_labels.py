"""Node labels and scheduling by them (docs/scheduling.md, "Node labels"): nodes started with labels
(cluster_utils' add_node(labels=)) are listed with them; a task or an actor with a label_selector runs only on
a node that has the labels, wherever it is submitted; a fallback_strategy is tried when no node matches; a
NodeLabelSchedulingStrategy's soft expressions are preferred; a selector no node matches is a clear error after
the infeasible timeout (a node with them may join meanwhile); bad labels get Ray's errors. (Ray's own tests: ray_suite/test_ray_node_labels.py.)"""
import pytest

import phalanx
from phalanx.cluster_utils import Cluster
from phalanx.util.scheduling_strategies import DoesNotExist, Exists, In, NodeLabelSchedulingStrategy, NotIn


@pytest.fixture(scope="module")
def zones():
    """Three nodes: the head (no labels), zone a (a GPU-type label), zone b."""
    if phalanx.is_initialized():
        phalanx.shutdown()
    cluster = Cluster()
    head = cluster.add_node(num_cpus=1, _system_config={"infeasible_timeout_ms": 2000})  # (it places what we submit)
    a = cluster.add_node(num_cpus=2, labels={"zone": "a", "accel": "h100"})
    b = cluster.add_node(num_cpus=2, labels={"zone": "b"})
    cluster.wait_for_nodes()
    phalanx.init(address=cluster.address)
    yield {"head": head.node_id, "a": a.node_id, "b": b.node_id}
    phalanx.shutdown()
    cluster.shutdown()


@phalanx.remote(num_cpus=0)
def where():
    return phalanx.get_runtime_context().get_node_id()


@phalanx.remote(num_cpus=0)
class Where:
    def node(self):
        return phalanx.get_runtime_context().get_node_id()


def test_nodes_are_listed_with_their_labels(zones):
    labels = {n["NodeID"]: n["Labels"] for n in phalanx.nodes() if n["Alive"]}
    assert labels[zones["a"]] == {"zone": "a", "accel": "h100", "ray.io/node-id": zones["a"]}
    assert labels[zones["head"]] == {"ray.io/node-id": zones["head"]}
    assert phalanx.get(phalanx.remote(lambda: phalanx.get_runtime_context().get_node_labels())
                       .options(label_selector={"zone": "b"}).remote())["zone"] == "b"


def test_tasks_and_actors_run_where_their_labels_are(zones):
    assert set(phalanx.get([where.options(label_selector={"zone": "a"}).remote() for _ in range(6)])) == {zones["a"]}
    assert set(phalanx.get([where.options(label_selector={"zone": "!a", "accel": "!h100"}).remote()
                            for _ in range(6)])) <= {zones["head"], zones["b"]}
    assert set(phalanx.get([where.options(label_selector={"zone": "in(a,b)"}).remote()
                            for _ in range(6)])) <= {zones["a"], zones["b"]}
    actor = Where.options(label_selector={"zone": "b"}).remote()
    assert phalanx.get(actor.node.remote()) == zones["b"]
    on_node = Where.options(label_selector={"ray.io/node-id": zones["a"]}).remote()
    assert phalanx.get(on_node.node.remote()) == zones["a"]


def test_a_task_submitted_from_another_node_keeps_its_selector(zones):
    @phalanx.remote(num_cpus=0, label_selector={"zone": "b"})
    def parent():
        return phalanx.get([where.options(label_selector={"zone": "a"}).remote() for _ in range(3)])
    assert set(phalanx.get(parent.remote())) == {zones["a"]}


def test_fallbacks_and_soft_expressions(zones):
    # no node is in zone c: the first fallback that one matches
    ref = where.options(label_selector={"zone": "c"},
                        fallback_strategy=[{"label_selector": {"zone": "d"}},
                                           {"label_selector": {"zone": "b"}}]).remote()
    assert phalanx.get(ref) == zones["b"]
    hard_soft = NodeLabelSchedulingStrategy(hard={"zone": In("a", "b")}, soft={"accel": In("h100")})
    assert phalanx.get(where.options(scheduling_strategy=hard_soft).remote()) == zones["a"]
    only_soft_missing = NodeLabelSchedulingStrategy(hard={"zone": Exists()}, soft={"accel": In("tpu")})
    assert phalanx.get(where.options(scheduling_strategy=only_soft_missing).remote()) in (zones["a"], zones["b"])
    none = NodeLabelSchedulingStrategy(hard={"zone": DoesNotExist(), "accel": NotIn("h100")})
    assert phalanx.get(where.options(scheduling_strategy=none).remote()) == zones["head"]


def test_a_selector_no_node_matches_fails_after_the_infeasible_timeout(zones):
    with pytest.raises(Exception, match=r"no live node has the labels \{zone in \(mars\)\}") as e:
        phalanx.get(where.options(label_selector={"zone": "mars"}).remote(), timeout=30)
    assert "zone=a" in str(e.value)  # (it says what the nodes have)
    actor = Where.options(label_selector={"zone": "mars"}).remote()
    with pytest.raises(Exception, match="no live node has the labels"):
        phalanx.get(actor.node.remote(), timeout=30)
    # the labels are there but not the room: an error too
    with pytest.raises(Exception, match="room for|no node has that much"):
        phalanx.get(where.options(label_selector={"zone": "a"}, num_cpus=8).remote(), timeout=30)


def test_bad_labels_and_selectors_get_rays_errors(zones):
    with pytest.raises(ValueError, match="Invalid label"):
        where.options(label_selector={"zone": "not ok"})
    with pytest.raises(ValueError, match="label_selector must be a dict"):
        where.options(label_selector=["zone"])
    with pytest.raises(ValueError, match="fallback_strategy"):
        where.options(fallback_strategy=[{"zone": "a"}])
    with pytest.raises(ValueError, match="cannot both be empty"):
        NodeLabelSchedulingStrategy(hard={})
    with pytest.raises(ValueError, match="must be one of the `In`, `NotIn`, `Exists` or `DoesNotExist`"):
        NodeLabelSchedulingStrategy(hard={"zone": "a"})
