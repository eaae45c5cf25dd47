"""ray.util.metrics (Counter, Gauge, Histogram, Metric; tag_keys, set_default_tags, info and the validation
errors) and each node's Prometheus endpoint, as Ray's `python/ray/tests/test_metrics_agent.py`,
`test_metrics.py` and `test_metric_cardinality.py` check them (ray-project/ray); each test is named after the
Ray test it follows. metrics_utils reads the endpoints (Ray's tests use `ray._private.test_utils`'
fetch_prometheus_timeseries / raw_metric_timeseries / wait_for_assertion and prometheus_client's parser).

What is asserted, as Ray exports it: a custom metric NAME is `ray_NAME`; a Counter is `ray_NAME_total` of type
counter (since Ray 2.10; under its older OpenCensus backend Ray also exports the count as a gauge `ray_NAME`,
"(DEPRECATED, use ray_NAME_total metric instead) desc", not under OpenTelemetry, its default now: the ports
assert `_total` only, and `test_counter` that no gauge comes with RAY_EXPORT_COUNTER_AS_GAUGE=0); a Histogram
is `ray_NAME_bucket{le="0.1"|"1.6"|"+Inf"}` (cumulative), `ray_NAME_sum`, `ray_NAME_count`; every sample
carries a `Component` label (raylet, gcs_server, core_worker for the workers' and the driver's metrics).

Changed, for `import ray` only: the session name Ray's end-to-end test compares SessionName with is private
(`global_worker.node.session_name`): the port checks that one non-empty SessionName is on all the samples;
`requests` is urllib (metrics_utils); the node's `address_info["metrics_export_port"]` /
`["raylet_socket_name"]` is the Cluster node's attribute of that name (as Ray's own
test_prometheus_file_based_service_discovery reads it); Ray's `_system_config={"metrics_report_interval_ms":
1000}` is the environment variable of that setting (Ray reports every 10 s by default; only Ray's speed
depends on it); Ray's `_METRICS` (system metrics that must be exported) is cut to those Ray documents as
public (the rest are names of Ray's own gRPC server, pull/push managers, spilling, GCS tables).

Left out: from test_metrics_agent.py, `test_metrics_export_event_aggregator_agent` (the dashboard's event
aggregator over gRPC and protobufs), `test_operation_stats` and `test_per_func_name_stats` (Ray's event-loop
and per-process metrics: `RAY_emit_main_service_metrics`, process names of Ray's own), the autoscaler and
dashboard parts of `test_metrics_export_end_to_end` and `test_metrics_export_node_metrics` (ports private to
Ray: AUTOSCALER_METRIC_PORT, DASHBOARD_METRIC_PORT) and the latter's `Component` set ({gcs, raylet, agent,
ray::IDLE, the driver}: Ray's processes), `test_counter_exported_as_gauge` (the deprecated gauge of the
OpenCensus backend; Ray skips it under its default OpenTelemetry one), `test_metrics_disablement`
(`_system_config` enable_metrics_collection), `test_prometheus_file_based_service_discovery` and
`test_prome_file_discovery_run_by_dashboard` (`ray._private.metrics_agent`' service discovery file),
`test_metrics_override_shouldnt_warn` (Ray's log_pubsub fixture), `test_invalid_system_metric_names`
(`ray._private.metrics_agent.Gauge`); test_cardinality_low_levels of test_metric_cardinality.py (only under
the OpenTelemetry backend, a `_system_config` switch); from test_metrics.py, `test_worker_stats`,
`test_node_object_metrics`, `test_running_tasks` (the raylet's GetNodeStats gRPC reply, `ray._private`) and
`test_opentelemetry_conflict` (Ray's protobuf registry); all of test_metrics_agent_2.py (the metrics agent,
OpenCensus and protobuf classes themselves); test_metrics_head.py (the dashboard's Grafana/Prometheus files).

`test_basic_custom_metrics`, `test_custom_metrics_with_extra_tags` and `test_custom_metrics_default_tags` set
the metric's `_metric` (the recorder Ray's metric hands each point to: `_metric.record(value, tags=...)`) to a
mock, as Ray's do."""
import sys
import urllib.request
import warnings
from collections import defaultdict
from unittest.mock import MagicMock

import pytest

import ray
from metrics_utils import prometheus_addresses, scrape, wait_for_assertion
from ray.util.metrics import Counter, Gauge, Histogram, Metric
from suite_utils import phalanx_differs, Signal as SignalActor
from suite_utils import wait_for_condition

# Ray's _METRICS cut to the system metrics Ray documents (its metric_defs' PUBLIC METRICS, the node metrics).
_METRICS = [
    "ray_node_disk_usage",
    "ray_node_mem_used",
    "ray_node_mem_total",
    "ray_node_cpu_utilization",
    "ray_object_store_memory",
]

_NODE_METRICS = [
    "ray_node_cpu_utilization",
    "ray_node_cpu_count",
    "ray_node_mem_used",
    "ray_node_mem_available",
    "ray_node_mem_total",
    "ray_node_disk_io_read",
    "ray_node_disk_io_write",
    "ray_node_disk_io_read_count",
    "ray_node_disk_io_write_count",
    "ray_node_disk_io_read_speed",
    "ray_node_disk_io_write_speed",
    "ray_node_disk_read_iops",
    "ray_node_disk_write_iops",
    "ray_node_disk_usage",
    "ray_node_disk_free",
    "ray_node_disk_utilization_percentage",
    "ray_node_network_sent",
    "ray_node_network_received",
    "ray_node_network_send_speed",
    "ray_node_network_receive_speed",
]
if sys.platform == "linux" or sys.platform == "linux2":
    _NODE_METRICS.append("ray_node_mem_shared_bytes")

_NODE_COMPONENT_METRICS = [
    "ray_component_cpu_percentage",
    "ray_component_rss_mb",
    "ray_component_uss_mb",
    "ray_component_num_fds",
]


@pytest.fixture
def _setup_cluster_for_test(ray_start_cluster, monkeypatch):
    """Ray's fixture of this name (enable_metrics_collection=True, its only parameter the ported tests use):
    two nodes, custom metrics from the driver, a task and an actor (the task and the actor stay alive, so are
    their metrics); yields the nodes' Prometheus addresses."""
    monkeypatch.setenv("RAY_metrics_report_interval_ms", "1000")
    NUM_NODES = 2
    cluster = ray_start_cluster
    # Add a head node.
    cluster.add_node()
    # Add worker nodes.
    [cluster.add_node() for _ in range(NUM_NODES - 1)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    worker_should_exit = SignalActor.remote()

    extra_tags = {"ray_version": ray.__version__}

    # Generate metrics in the driver.
    counter = Counter("test_driver_counter", description="desc")
    counter.inc(tags=extra_tags)
    gauge = Gauge("test_gauge", description="gauge")
    gauge.set(1, tags=extra_tags)

    # Generate some metrics from actor & tasks.
    @ray.remote
    def f():
        counter = Counter("test_counter", description="desc")
        counter.inc()
        counter = ray.get(ray.put(counter))  # Test serialization.
        counter.inc(tags=extra_tags)
        counter.inc(2, tags=extra_tags)
        ray.get(worker_should_exit.wait.remote())

    # Generate some metrics for the placement group.
    pg = ray.util.placement_group(bundles=[{"CPU": 1}])
    ray.get(pg.ready())
    ray.util.remove_placement_group(pg)

    @ray.remote
    class A:
        async def ping(self):
            histogram = Histogram("test_histogram", description="desc", boundaries=[0.1, 1.6])
            histogram = ray.get(ray.put(histogram))  # Test serialization.
            histogram.observe(1.5, tags=extra_tags)
            histogram.observe(0.0, tags=extra_tags)
            ray.get(worker_should_exit.wait.remote())

    a = A.remote()
    obj_refs = [f.remote(), a.ping.remote()]

    yield prometheus_addresses()

    ray.get(worker_should_exit.send.remote())
    ray.get(obj_refs)


def _total(samples, name):
    """The sum of the samples named `name` (Ray keeps the tags of Counter.inc's tags= that are not among the
    metric's tag_keys or not, by version: the total is the same)."""
    return sum(s.value for s in samples if s.name == name)


def test_metrics_export_end_to_end(_setup_cluster_for_test):
    TEST_TIMEOUT_S = 30
    prom_addresses = _setup_cluster_for_test

    def test_cases():
        result = scrape(prom_addresses)
        components_dict = result.components
        metric_descriptors = result.descriptors
        metric_samples = result.samples
        metric_names = metric_descriptors.keys()

        # Raylet should be on every node
        assert all("raylet" in components for components in components_dict.values())

        # GCS server should be on one node
        assert any("gcs_server" in components for components in components_dict.values())

        # Core worker should be on at least on node
        assert any("core_worker" in components for components in components_dict.values())

        # Make sure our user defined metrics exist and have the correct types (the counters' _total).
        for metric_name in ["test_counter_total", "test_driver_counter_total", "test_gauge"]:
            metric_name = f"ray_{metric_name}"
            assert metric_name in metric_names, f"metric {metric_name} not in {sorted(metric_names)}"
            if metric_name.endswith("_total"):
                assert metric_descriptors[metric_name].type == "counter"
            elif metric_name.endswith("_gauge"):
                assert metric_descriptors[metric_name].type == "gauge"

        # Make sure metrics are recorded.
        for metric in _METRICS:
            assert metric in metric_names, f"metric {metric} not in {sorted(metric_names)}"

        # All Ray metrics have label "Version" and "SessionName" (one session).
        session_names = set()
        for sample in metric_samples:
            if sample.name in _METRICS:
                assert sample.labels.get("Version") == ray.__version__, sample
                assert sample.labels.get("SessionName"), sample
                session_names.add(sample.labels["SessionName"])
        assert len(session_names) == 1, session_names

        # Make sure the numeric values are correct
        assert _total(metric_samples, "ray_test_counter_total") == 4.0
        assert _total(metric_samples, "ray_test_driver_counter_total") == 1.0

    wait_for_assertion(test_cases, timeout=TEST_TIMEOUT_S, retry_interval_ms=1000)


def test_metrics_export_node_metrics(shutdown_only, init_kwargs):
    # Verify node metrics are available.
    context = ray.init(num_cpus=1, **init_kwargs)
    addr = f"localhost:{context.address_info['metrics_export_port']}"

    def verify_node_metrics():
        avail_metrics = set(scrape([addr]).descriptors)

        for node_metric in _NODE_METRICS:
            assert node_metric in avail_metrics, f"{node_metric} not in {sorted(avail_metrics)}"
        for node_metric in _NODE_COMPONENT_METRICS:
            assert node_metric in avail_metrics, f"{node_metric} not in {sorted(avail_metrics)}"

    wait_for_assertion(verify_node_metrics, timeout=30)


def test_histogram(_setup_cluster_for_test):
    TEST_TIMEOUT_S = 30
    prom_addresses = _setup_cluster_for_test

    def test_cases():
        result = scrape(prom_addresses)
        metric_descriptors = result.descriptors
        metric_samples = result.samples
        metric_names = metric_descriptors.keys()
        custom_histogram_metric_name = "ray_test_histogram_bucket"
        assert custom_histogram_metric_name in metric_names
        assert metric_descriptors[custom_histogram_metric_name].type == "histogram"

        test_histogram_samples = [m for m in metric_samples if "test_histogram" in m.name]
        buckets = {m.labels["le"]: m.value for m in test_histogram_samples if "_bucket" in m.name}
        # In Prometheus data model
        # the histogram is cumulative. So we expect the count to appear in
        # <1.1 and <+Inf buckets.
        assert buckets == {"0.1": 1.0, "1.6": 2.0, "+Inf": 2.0}
        hist_count = [m for m in test_histogram_samples if "_count" in m.name][0].value
        assert hist_count == 2

    wait_for_assertion(test_cases, timeout=TEST_TIMEOUT_S, retry_interval_ms=1000)


@pytest.mark.skipif(sys.platform == "win32", reason="Not working in Windows.")
def test_counter(monkeypatch, shutdown_only, init_kwargs):
    # Test to make sure we don't export counter as gauge
    # if RAY_EXPORT_COUNTER_AS_GAUGE is 0
    monkeypatch.setenv("RAY_EXPORT_COUNTER_AS_GAUGE", "0")
    context = ray.init(num_cpus=1, **init_kwargs)

    @ray.remote
    class Actor:
        def __init__(self):
            self.counter = Counter("test_counter", description="desc")
            self.counter.inc(2.0)

    _ = Actor.remote()

    def check_metrics():
        metrics_page = "localhost:{}".format(context.address_info["metrics_export_port"])
        metric_descriptors = scrape([metrics_page]).descriptors

        assert "ray_test_counter" not in metric_descriptors
        assert "ray_test_counter_total" in metric_descriptors

    wait_for_assertion(check_metrics, timeout=60)


@pytest.fixture
def metric_mock():
    mock = MagicMock()
    mock.record.return_value = "haha"
    yield mock


# Unit test custom metrics.


def test_basic_custom_metrics(metric_mock):
    # Make sure each of metric works as expected.
    # -- Counter --
    count = Counter("count", tag_keys=("a",))
    with pytest.raises(TypeError):
        count.inc("hi")
    with pytest.raises(ValueError):
        count.inc(0)
    with pytest.raises(ValueError):
        count.inc(-1)
    count._metric = metric_mock
    count.inc(1, {"a": "1"})
    metric_mock.record.assert_called_with(1, tags={"a": "1"})

    # -- Gauge --
    gauge = Gauge("gauge", description="gauge")
    gauge._metric = metric_mock
    gauge.set(4)
    metric_mock.record.assert_called_with(4, tags={})

    # -- Histogram
    histogram = Histogram("hist", description="hist", boundaries=[1.0, 3.0], tag_keys=("a", "b"))
    histogram._metric = metric_mock
    tags = {"a": "10", "b": "b"}
    histogram.observe(8, tags=tags)
    metric_mock.record.assert_called_with(8, tags=tags)


def test_custom_metrics_with_extra_tags(metric_mock):
    base_tags = {"a": "1"}
    extra_tags = {"a": "1", "b": "2"}

    # -- Counter --
    count = Counter("count", tag_keys=("a",))
    with pytest.raises(ValueError):
        count.inc(1)

    count._metric = metric_mock

    # Increment with base tags
    count.inc(1, tags=base_tags)
    metric_mock.record.assert_called_with(1, tags=base_tags)
    metric_mock.reset_mock()

    # Increment with extra tags
    count.inc(1, tags=extra_tags)
    metric_mock.record.assert_called_with(1, tags=extra_tags)
    metric_mock.reset_mock()

    # -- Gauge --
    gauge = Gauge("gauge", description="gauge", tag_keys=("a",))
    gauge._metric = metric_mock

    # Record with base tags
    gauge.set(4, tags=base_tags)
    metric_mock.record.assert_called_with(4, tags=base_tags)
    metric_mock.reset_mock()

    # Record with extra tags
    gauge.set(4, tags=extra_tags)
    metric_mock.record.assert_called_with(4, tags=extra_tags)
    metric_mock.reset_mock()

    # -- Histogram
    histogram = Histogram("hist", description="hist", boundaries=[1.0, 3.0], tag_keys=("a",))
    histogram._metric = metric_mock

    # Record with base tags
    histogram.observe(8, tags=base_tags)
    metric_mock.record.assert_called_with(8, tags=base_tags)
    metric_mock.reset_mock()

    # Record with extra tags
    histogram.observe(8, tags=extra_tags)
    metric_mock.record.assert_called_with(8, tags=extra_tags)
    metric_mock.reset_mock()


def test_custom_metrics_info(metric_mock):
    # Make sure .info public method works.
    histogram = Histogram("hist", description="hist", boundaries=[1.0, 2.0], tag_keys=("a", "b"))
    assert histogram.info["name"] == "hist"
    assert histogram.info["description"] == "hist"
    assert histogram.info["boundaries"] == [1.0, 2.0]
    assert histogram.info["tag_keys"] == ("a", "b")
    assert histogram.info["default_tags"] == {}
    histogram.set_default_tags({"a": "a"})
    assert histogram.info["default_tags"] == {"a": "a"}


def test_custom_metrics_default_tags(metric_mock):
    histogram = Histogram(
        "hist", description="hist", boundaries=[1.0, 2.0], tag_keys=("a", "b")
    ).set_default_tags({"b": "b"})
    histogram._metric = metric_mock

    # Check specifying non-default tags.
    histogram.observe(10, tags={"a": "a"})
    metric_mock.record.assert_called_with(10, tags={"a": "a", "b": "b"})

    # Check overriding default tags.
    tags = {"a": "10", "b": "c"}
    histogram.observe(8, tags=tags)
    metric_mock.record.assert_called_with(8, tags=tags)


def test_custom_metrics_edge_cases(metric_mock):
    # None or empty boundaries are not allowed.
    with pytest.raises(ValueError):
        Histogram("hist")

    with pytest.raises(ValueError):
        Histogram("hist", boundaries=[])

    # Empty name is not allowed.
    with pytest.raises(ValueError):
        Counter("")

    # The tag keys must be a tuple type.
    with pytest.raises(TypeError):
        Counter("name", tag_keys=("a"))

    with pytest.raises(ValueError):
        Histogram("hist", boundaries=[-1, 1, 2])

    with pytest.raises(ValueError):
        Histogram("hist", boundaries=[0, 1, 2])

    with pytest.raises(ValueError):
        Histogram("hist", boundaries=[-1, -0.5, -0.1])


def test_custom_metrics_validation(shutdown_only, init_kwargs):
    ray.init(num_cpus=1, **init_kwargs)
    # Missing tag(s) from tag_keys.
    metric = Counter("name", tag_keys=("a", "b"))
    metric.set_default_tags({"a": "1"})

    metric.inc(1.0, {"b": "2"})
    metric.inc(1.0, {"a": "1", "b": "2"})

    with pytest.raises(ValueError):
        metric.inc(1.0)

    with pytest.raises(ValueError):
        metric.inc(1.0, {"a": "2"})

    # tag_keys must be tuple.
    with pytest.raises(TypeError):
        Counter("name", tag_keys="a")
    # tag_keys must be strs.
    with pytest.raises(TypeError):
        Counter("name", tag_keys=(1,))

    metric = Counter("name", tag_keys=("a",))
    # Set default tag that isn't in tag_keys.
    with pytest.raises(ValueError):
        metric.set_default_tags({"a": "1", "c": "2"})
    # Default tag value must be str.
    with pytest.raises(TypeError):
        metric.set_default_tags({"a": 1})
    # Tag value must be str.
    with pytest.raises(TypeError):
        metric.inc(1.0, {"a": 1})


_FAULTY_METRIC_REGEX = ".*Invalid metric name.*"


def test_invalid_application_metric_names():
    warnings.simplefilter("always")
    with pytest.raises(ValueError, match="Empty name is not allowed. Please provide a metric name."):
        Metric("")
    with pytest.warns(UserWarning, match=_FAULTY_METRIC_REGEX):
        Metric("name-cannot-have-dashes")
    with pytest.warns(UserWarning, match=_FAULTY_METRIC_REGEX):
        Metric("1namecannotstartwithnumber")
    with pytest.warns(UserWarning, match=_FAULTY_METRIC_REGEX):
        Metric("name.cannot.have.dots")


# test_metrics.py


def test_multi_node_metrics_export_port_discovery(ray_start_cluster):
    NUM_NODES = 3
    cluster = ray_start_cluster
    nodes = [cluster.add_node() for _ in range(NUM_NODES)]
    nodes = {node.metrics_export_port: node for node in nodes}
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    node_info_list = ray.nodes()

    for node_info in node_info_list:
        metrics_export_port = node_info["MetricsExportPort"]
        node = nodes[metrics_export_port]
        assert node.raylet_socket_name == node_info["RayletSocketName"]

        # Make sure we can ping Prometheus endpoints.
        def test_prometheus_endpoint():
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            # Fail the request early on if connection timeout
            with opener.open(f"http://localhost:{metrics_export_port}", timeout=1.0) as response:
                return response.status == 200

        # The dashboard takes more than 2s to startup.
        wait_for_condition(test_prometheus_endpoint, timeout=10)


# test_metric_cardinality.py

_TO_TEST_METRICS = ["ray_tasks", "ray_actors", "ray_running_jobs"]
_COMPONENT_TAG_KEY = "Component"
WORKER_ID_TAG_KEY = "WorkerId"
TASK_OR_ACTOR_NAME_TAG_KEY = "Name"


@pytest.fixture
def _setup_cluster_for_cardinality_test(request, ray_start_cluster, monkeypatch):
    """test_metric_cardinality.py's `_setup_cluster_for_test`: one node at the cardinality level of the
    parameter (RAY_metric_cardinality_level, the setting Ray's metrics docs name), a task and an actor."""
    core_metric_cardinality_level = request.param
    monkeypatch.setenv("RAY_metric_cardinality_level", core_metric_cardinality_level)
    monkeypatch.setenv("RAY_metrics_report_interval_ms", "1000")
    cluster = ray_start_cluster
    cluster.add_node()
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)

    @ray.remote
    def t():
        print("task")

    @ray.remote
    class A:
        async def run(self):
            print("actor")

    a = A.remote()
    obj_refs = [t.remote(), a.run.remote()]

    yield prometheus_addresses()

    ray.get(obj_refs)


def _cardinality_difference(cardinality, metric):
    """phalanx's ray_tasks and ray_actors are counted by each node's raylet, not by each worker: no WorkerId
    or Name labels at Ray's "legacy" level; it exports no ray_running_jobs (its GCS is redis-server)."""
    if metric == "ray_running_jobs":
        return [phalanx_differs("phalanx exports no ray_running_jobs: its GCS is redis-server, which counts no jobs", run=False)]
    if cardinality == "legacy":
        return [phalanx_differs("phalanx counts ray_tasks and ray_actors per node (raylet), not per worker: no "
                                "WorkerId or Name labels at Ray's legacy cardinality level", run=False)]
    return []


def _cardinality_level_test(_setup_cluster_for_test, cardinality_level, metric):
    """
    Test that the ray_tasks and ray_actors metric are reported with the expected cardinality level
    """
    TEST_TIMEOUT_S = 30
    prom_addresses = _setup_cluster_for_test

    def _validate():
        metric_samples = defaultdict(list)
        for sample in scrape(prom_addresses).samples:
            metric_samples[sample.name].append(sample)
        samples = metric_samples.get(metric)
        assert samples, f"Metric {metric} not found in samples"
        for sample in samples:
            if cardinality_level == "recommended":
                # If the cardinality level is recommended, the WorkerId tag should
                # be removed
                assert sample.labels.get(WORKER_ID_TAG_KEY) is None, f"Sample {sample} contains WorkerId tag"
            elif cardinality_level == "legacy":
                # If the cardinality level is legacy, the WorkerId tag should be
                # present
                assert (
                    sample.labels.get(WORKER_ID_TAG_KEY) is not None
                ), f"Sample {sample} does not contain WorkerId tag"
                if metric == "ray_tasks" or metric == "ray_actors":
                    assert (
                        sample.labels.get(TASK_OR_ACTOR_NAME_TAG_KEY) is not None
                    ), f"Sample {sample} does not contain Name tag"
            else:
                raise ValueError(f"Unknown cardinality level: {cardinality_level}")

            # The Component tag should be present on all cardinality levels
            assert (
                sample.labels.get(_COMPONENT_TAG_KEY) is not None
            ), f"Sample {sample} does not contain Component tag"

    wait_for_assertion(
        _validate,
        timeout=TEST_TIMEOUT_S,
        retry_interval_ms=1000,  # Yield resource for other processes
    )


@pytest.mark.parametrize(
    "_setup_cluster_for_cardinality_test,cardinality_level,metric",
    [
        pytest.param(cardinality, cardinality, metric, marks=_cardinality_difference(cardinality, metric))
        for cardinality in ["recommended", "legacy"]
        for metric in _TO_TEST_METRICS
    ],
    indirect=["_setup_cluster_for_cardinality_test"],
)
def test_cardinality_recommended_and_legacy_levels(
    _setup_cluster_for_cardinality_test, cardinality_level, metric
):
    _cardinality_level_test(_setup_cluster_for_cardinality_test, cardinality_level, metric)


if __name__ == "__main__":
    sys.exit(pytest.main(["-sv", __file__]))
