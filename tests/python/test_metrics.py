"""The node's Prometheus endpoint and phalanx.util.metrics, end to end (docs/observability.md, "Metrics"):
a metric recorded in a task on another node is on that node's page, labelled; a counter of a worker that
exited is still there (no total falls back); the page has the node's own metrics; a node's labels are in
its record; a bad metric is Ray's error. (Ray's own tests of these: ray_suite/test_ray_metrics.py.)"""
import time
import urllib.request

import pytest

import phalanx
from phalanx.util.metrics import Counter, Gauge, Histogram


@pytest.fixture
def two_nodes(monkeypatch):
    monkeypatch.setenv("PHALANX_metrics_report_interval_ms", "100")
    phalanx.init(num_cpus=1, num_nodes=2, labels={"zone": "z1"})
    yield
    phalanx.shutdown()


def _page(node):
    with urllib.request.urlopen(f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics",
                                timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def _wait_for_line(node, needle, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        page = _page(node)
        lines = [line for line in page.splitlines() if needle in line]
        if lines:
            return lines
        assert time.monotonic() < deadline, f"{needle!r} not on the page of {node['NodeID']}:\n{page[-3000:]}"
        time.sleep(0.1)


def test_a_counter_recorded_on_another_node_is_on_that_nodes_page_and_outlives_its_worker(two_nodes):
    nodes = {n["NodeID"]: n for n in phalanx.nodes() if n["Alive"]}
    assert len(nodes) == 2 and all(n["MetricsExportPort"] > 0 for n in nodes.values())
    assert all(n["Labels"]["zone"] == "z1" and n["Labels"]["ray.io/node-id"] == i for i, n in nodes.items())

    @phalanx.remote(max_calls=1, resources={"node:1": 1})
    def work(n):
        Counter("jobs_done", description="jobs", tag_keys=("kind",)).inc(n, tags={"kind": "sim"})
        Histogram("step_seconds", boundaries=[0.5, 2.0]).observe(1.0)
        return phalanx.get_runtime_context().get_node_id()

    where = phalanx.get(work.remote(3))
    phalanx.get(work.remote(4))  # (max_calls=1: each ran in a worker that exited after it)
    deadline = time.monotonic() + 20
    while True:  # (each worker's report comes on its own: 3 from the first, 4 from the second)
        lines = _wait_for_line(nodes[where], "ray_jobs_done_total{")
        if sum(float(line.rsplit(" ", 1)[1]) for line in lines) == 7.0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert sum(float(line.rsplit(" ", 1)[1]) for line in lines) == 7.0, lines
    assert len({line.split("WorkerId=")[1] for line in lines}) == 2, lines  # (two workers, both gone now)
    assert all('kind="sim"' in line and 'Component="core_worker"' in line and "WorkerId=" in line
               and 'NodeAddress="127.0.0.1"' in line for line in lines), lines
    buckets = _wait_for_line(nodes[where], 'ray_step_seconds_bucket{')
    assert any('le="2"' in b for b in buckets), buckets
    other = next(n for i, n in nodes.items() if i != where)
    assert "ray_jobs_done_total" not in _page(other)


def test_a_gauge_from_the_driver_and_the_nodes_own_metrics(two_nodes):
    me = phalanx.get_runtime_context().get_node_id()
    node = next(n for n in phalanx.nodes() if n["NodeID"] == me)
    Gauge("queue_depth", tag_keys=("q",)).set_default_tags({"q": "main"}).set(12)
    line = _wait_for_line(node, "ray_queue_depth{")[0]
    assert line.endswith(" 12") and 'q="main"' in line
    page = _page(node)
    for family in ("ray_tasks", "ray_resources", "ray_object_store_memory", "ray_node_cpu_count",
                   "ray_node_mem_total", "ray_component_rss_bytes"):
        assert f"# TYPE {family} gauge" in page, family
    assert 'ray_resources{Name="CPU",State="AVAILABLE"' in page
    assert 'ray_component_rss_bytes{Component="raylet"' in page


def test_bad_metrics_get_rays_errors():
    with pytest.raises(ValueError, match="Empty name"):
        Counter("")
    with pytest.raises(TypeError, match="tag_keys should be a tuple"):
        Counter("c", tag_keys=["a"])
    with pytest.raises(ValueError, match="Unrecognized tag key b"):
        Counter("c", tag_keys=("a",)).set_default_tags({"b": "1"})
    with pytest.raises(ValueError, match="Missing value for tag key"):
        Counter("c", tag_keys=("a",)).inc()
    with pytest.raises(ValueError, match="value must be >0"):
        Counter("c").inc(0)
    with pytest.raises(ValueError, match="boundaries argument should be provided"):
        Histogram("h")
    with pytest.raises(UserWarning, match="Invalid metric name"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Gauge("9lives")
