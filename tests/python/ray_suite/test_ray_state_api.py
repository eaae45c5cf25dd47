"""Ray's state API (`ray.util.state`) as ray-project/ray's `python/ray/tests/test_state_api.py`,
`test_state_api_2.py` and `test_state_api_summary.py` check it through the public functions: each test is
named after Ray's and checks what it checks, through `ray` and `ray.util.state` only. Where Ray's test also
drives its CLI (click's CliRunner on `ray.util.state.state_cli`), that part is left out here (phalanx's CLI
is tested in tests/python/test_state_api.py). Two tests follow an older version of Ray's file, where the
newest needs what phalanx has not (test_list_get_nodes: `node_name=` and node labels; test_filter: its API
part only).

Left out, with the reason:
- needing Ray's internals: the StateAPIManager and StateDataSourceClient unit tests with mocked gRPC replies
  (test_api_manager_*, test_state_data_source_client*, test_get_all_node_info_with_filters,
  test_cli_format_print), test_state_schema (pydantic's type checks of StateSchema), test_parse_filter and
  test_id_to_ip_map (state_cli and state_manager helpers), test_ray_address_to_api_server_url and
  test_state_api_client_periodic_warning (the dashboard's HTTP server), test_state_api_with_external_dashboard_override,
  test_timeline_request, test_state_api_rate_limit_with_failure and
  test_state_api_server_enforce_concurrent_http_requests (the dashboard and RAY_testing_asio_delay_us),
  test_network_failure, test_network_partial_failures*, test_raise_on_missing_output_* and test_data_truncate
  (ray._private's kill_raylet, gRPC delay injection, RAY_MAX_LIMIT_FROM_* read at Ray's import),
  test_callsite_warning and test_object_summary (RAY_record_ref_creation_sites: phalanx records no call sites),
  test_core_state_api_usage_tags (ray._private.usage), test_timeline (ray._private.profiling),
  test_state_init_multiple_threads (ray._private.state), test_experimental_import_deprecation
  (ray.experimental.state), test_state_api_scale_smoke (a release test script), test_get_id_not_found and
  test_cli_apis_sanity_check (CliRunner, and the dashboard's job client), test_list_get_jobs (the job client at
  the dashboard's address from ray._private.worker), test_summarize_by_lineage (summary_by="lineage" is not
  built), test_actor_task_with_repr_name (the ray_start_with_dashboard fixture);
- needing what phalanx does not have: test_list_cluster_events (no cluster events), test_list_runtime_envs
  (pip runtime environments), test_list_get_tasks_call_site and test_list_actor_tasks_call_site
  (RAY_record_task_actor_creation_sites), test_list_get_tasks_label_selector and
  test_list_actor_tasks_label_selector (label selectors and node labels).
Marked as differing on phalanx (suite_utils.phalanx_differs; docs/ray_compat.md): a task waiting for its
arguments is not told from one waiting for a node (no PENDING_ARGS_AVAIL), the retries of retry_exceptions
are one attempt, actor calls queued at the actor are not seen, and repr_name is not recorded."""
import os
import signal
import tempfile
import time
import uuid
from collections import Counter

import numpy as np
import pytest

import ray
from ray.util.state import (get_actor, get_node, get_objects, get_placement_group, get_task, get_worker, list_actors,
                            list_nodes, list_objects, list_placement_groups, list_tasks, list_workers,
                            summarize_actors, summarize_tasks)
from ray.util.state.common import ActorState, GetApiOptions, ListApiOptions
from suite_utils import phalanx_differs, wait_for_condition


def is_hex(val):
    try:
        int_val = int(val, 16)
    except ValueError:
        return False
    val = val.lstrip("0")
    return f"0x{val}" == hex(int_val)


@pytest.fixture(scope="module")
def class_ray_instance():
    """Ray's fixture of this name: one cluster for the tests that use it."""
    if ray.is_initialized():
        ray.shutdown()
    yield ray.init()
    ray.shutdown()


def test_list_api_options_has_conflicting_filters():
    options = ListApiOptions(filters=[("name", "=", "task_name")])
    assert not options.has_conflicting_filters()
    options = ListApiOptions(filters=[("name", "=", "task_name"), ("job_id", "=", "1")])
    assert not options.has_conflicting_filters()
    options = ListApiOptions(filters=[("name", "!=", "task_name_1"), ("name", "!=", "task_name_2")])
    assert not options.has_conflicting_filters()
    options = ListApiOptions(filters=[("name", "=", "task_name_1"), ("name", "=", "task_name_1")])
    assert not options.has_conflicting_filters()
    options = ListApiOptions(filters=[("name", "=", "task_name_1"), ("name", "=", "task_name_2")])
    assert options.has_conflicting_filters()


def test_list_get_actors(class_ray_instance):
    @ray.remote
    class A:
        pass

    @ray.remote(num_gpus=1)
    class UnschedulableActor:
        pass

    job_id = ray.get_runtime_context().get_job_id()
    node_id = ray.get_runtime_context().get_node_id()
    a = A.remote()
    b = UnschedulableActor.remote()

    def verify():
        actors = list_actors(filters=[("actor_id", "=", a._actor_id.hex())])
        assert len(actors) == 1
        assert actors[0]["state"] == "ALIVE"
        assert is_hex(actors[0]["actor_id"])
        assert a._actor_id.hex() == actors[0]["actor_id"]
        assert actors[0]["job_id"] == job_id
        assert actors[0]["node_id"] == node_id

        actors = list_actors(filters=[("actor_id", "=", b._actor_id.hex())])
        assert actors[0]["node_id"] is None

        actors = list_actors(detail=True)
        for actor in actors:
            get_actor_data = get_actor(actor["actor_id"])
            assert get_actor_data is not None
            assert get_actor_data == actor
        return True

    wait_for_condition(verify)
    print(list_actors())


def test_list_actors_namespace(class_ray_instance):
    @ray.remote
    class A:
        pass

    namespace1 = "namespace_" + str(uuid.uuid4())
    namespace2 = "namespace_" + str(uuid.uuid4())
    A.options(namespace=namespace1, name="x").remote()
    A.options(namespace=namespace2, name="y").remote()

    def verify():
        actors = list_actors()
        namespaces = Counter([actor["ray_namespace"] for actor in actors])
        assert namespaces[namespace1] == 1
        assert namespaces[namespace2] == 1
        namespace1_actors = list_actors(filters=[("ray_namespace", "=", namespace1)])
        assert len(namespace1_actors) == 1
        assert namespace1_actors[0]["ray_namespace"] == namespace1
        return True

    wait_for_condition(verify)


def test_list_get_pgs(shutdown_only):
    ray.init()
    pg = ray.util.placement_group(bundles=[{"CPU": 1}])  # noqa

    def verify():
        pgs = list_placement_groups()
        assert len(pgs) == 1
        assert pgs[0]["state"] == "CREATED"
        assert is_hex(pgs[0]["placement_group_id"])
        assert pg.id.hex() == pgs[0]["placement_group_id"]

        pgs = list_placement_groups(detail=True)
        for pg_data in pgs:
            get_pg_data = get_placement_group(pg_data["placement_group_id"])
            assert get_pg_data is not None
            assert pg_data == get_pg_data
        return True

    wait_for_condition(verify)
    print(list_placement_groups())


def test_list_get_nodes(shutdown_only):
    ray.init()

    def verify():
        nodes = list_nodes()
        assert nodes[0]["state"] == "ALIVE"
        assert is_hex(nodes[0]["node_id"])

        check_nodes = ray.nodes()
        assert len(check_nodes) == len(nodes)
        check_nodes = sorted(check_nodes, key=lambda n: n["NodeID"])
        nodes = sorted(nodes, key=lambda n: n["node_id"])
        for check_node, node in zip(check_nodes, nodes):
            assert check_node["NodeID"] == node["node_id"]
            assert check_node["NodeName"] == node["node_name"]

        nodes = list_nodes(detail=True)
        for node in nodes:
            get_node_data = get_node(node["node_id"])
            assert get_node_data == node
        return True

    wait_for_condition(verify)
    print(list_nodes())


def test_list_get_workers(shutdown_only):
    ray.init()

    def verify():
        workers = list_workers(detail=True)
        assert is_hex(workers[0]["worker_id"])
        # +1 to take into account of drivers.
        assert len(workers) == ray.cluster_resources()["CPU"] + 1
        assert workers[0]["end_time_ms"] == 0

        workers = list_workers(detail=True)
        for worker in workers:
            got_worker = get_worker(worker["worker_id"])
            assert got_worker == worker
        return True

    wait_for_condition(verify)

    workers = list_workers()
    assert workers[-1]["pid"] != os.getpid()  # (never this test's own process: the suite would die with it)
    os.kill(workers[-1]["pid"], signal.SIGKILL)

    def verify():
        workers = list_workers(detail=True, filters=[("is_alive", "=", "False")], raise_on_missing_output=False)
        assert len(workers) == 1
        assert workers[0]["end_time_ms"] != 0
        return True

    wait_for_condition(verify)
    print(list_workers(detail=True))


@phalanx_differs("a task waiting for its arguments is not told from one waiting for a node (no PENDING_ARGS_AVAIL)")
def test_list_get_tasks(shutdown_only):
    ray.init(num_cpus=2)
    job_id = ray.get_runtime_context().get_job_id()
    node_id = ray.get_runtime_context().get_node_id()

    @ray.remote
    def f():
        import time

        time.sleep(30)

    @ray.remote
    def g(dep):
        import time

        time.sleep(30)

    @ray.remote(num_gpus=1)
    def impossible():
        pass

    f_refs = [f.options(name=f"f_{i}").remote() for i in range(2)]  # noqa
    g_ref = g.remote(f.remote())  # noqa
    im_ref = impossible.remote()  # noqa

    def verify_task_from_objectref(task, job_id, tasks):
        assert task["job_id"] == job_id
        assert task["actor_id"] is None
        assert any(task["task_id"] == t["task_id"] for t in tasks)

    def verify():
        tasks = list_tasks()
        assert len(tasks) == 5
        for task in tasks:
            assert task["job_id"] == job_id
        for task in tasks:
            assert task["actor_id"] is None

        for ref in f_refs:
            verify_task_from_objectref(get_task(ref), job_id, tasks)
        verify_task_from_objectref(get_task(g_ref), job_id, tasks)
        verify_task_from_objectref(get_task(im_ref), job_id, tasks)

        assert len([t for t in tasks if t["state"] == "SUBMITTED_TO_WORKER"]) == 0
        assert len([t for t in tasks if t["state"] == "PENDING_NODE_ASSIGNMENT"]) == 2
        assert len([t for t in tasks if t["state"] == "PENDING_ARGS_AVAIL"]) == 1
        assert len([t for t in tasks if t["state"] == "RUNNING"]) == 2

        tasks = list_tasks(detail=True)
        for task in tasks:
            get_task_data = get_task(task["task_id"])
            assert get_task_data == task

        tasks = list_tasks(filters=[("state", "=", "PENDING_NODE_ASSIGNMENT")])
        for task in tasks:
            assert task["node_id"] is None
        tasks = list_tasks(filters=[("state", "=", "RUNNING")])
        for task in tasks:
            assert task["node_id"] == node_id
        tasks = list_tasks(filters=[("job_id", "=", job_id)])
        for task in tasks:
            assert task["job_id"] == job_id
        tasks = list_tasks(filters=[("name", "=", "f_0")], limit=1)
        assert len(tasks) == 1
        tasks = list_tasks(filters=[("STATE", "=", "PENDING_ARGS_AVAIL")], limit=1)
        assert len(tasks) == 1
        return True

    wait_for_condition(verify)
    print(list_tasks())


@phalanx_differs("the retries of a retry_exceptions task run inside one run of its worker: one attempt is recorded")
def test_list_get_task_multiple_attempt_all_failed(shutdown_only):
    ray.init(num_cpus=2)
    job_id = ray.get_runtime_context().get_job_id()
    node_id = ray.get_runtime_context().get_node_id()

    @ray.remote(retry_exceptions=True, max_retries=2)
    def f():
        raise ValueError("f is expected to failed")

    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(f.remote())

    def verify(task_attempts):
        assert len(task_attempts) == 3  # 2 retries + 1 initial run
        for task_attempt in task_attempts:
            assert task_attempt["job_id"] == job_id
            assert task_attempt["state"] == "FAILED"
            assert task_attempt["node_id"] == node_id
        assert {task_attempt["attempt_number"] for task_attempt in task_attempts} == {0, 1, 2}
        assert len({task_attempt["task_id"] for task_attempt in task_attempts}) == 1
        return True

    wait_for_condition(lambda: verify(list_tasks()))
    task_id = list_tasks()[0]["task_id"]
    wait_for_condition(lambda: verify(get_task(task_id)))


@phalanx_differs("the retries of a retry_exceptions task run inside one run of its worker: one attempt is recorded")
def test_list_get_task_multiple_attempt_finished_after_retry(shutdown_only):
    ray.init(num_cpus=2)

    @ray.remote
    class Phaser:
        def __init__(self):
            self.i = 0

        def inc(self):
            self.i += 1
            if self.i < 3:
                raise ValueError(f"First two tries are expected to fail (try={self.i}).")

    phaser = Phaser.remote()

    @ray.remote(retry_exceptions=True, max_retries=3)
    def f():
        ray.get(phaser.inc.remote())

    ray.get(f.remote())

    def verify(task_attempts):
        assert len(task_attempts) == 3
        for task_attempt in task_attempts[1:]:
            assert task_attempt["state"] == "FAILED"
        assert {task_attempt["attempt_number"] for task_attempt in task_attempts} == {0, 1, 2}
        return True

    wait_for_condition(lambda: verify(list_tasks(filters=[("name", "=", "f")])))


@phalanx_differs("actor calls sent straight to the actor's worker are seen once they end, not while queued there")
def test_list_actor_tasks(shutdown_only):
    ray.init(num_cpus=2)
    job_id = ray.get_runtime_context().get_job_id()

    @ray.remote(max_concurrency=2)
    class Actor:
        def call(self):
            import time

            time.sleep(30)

    a = Actor.remote()
    actor_id = a._actor_id.hex()
    calls = [a.call.remote() for _ in range(10)]  # noqa

    def verify():
        tasks = list_tasks()
        for task in tasks:
            assert task["job_id"] == job_id
        for task in tasks:
            assert task["actor_id"] == actor_id
        # Actor.__init__: 1 finished; Actor.call: 2 running, 8 waiting for execution (queued).
        assert len(tasks) == 11
        assert len([t for t in tasks if t["state"] == "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY"]) == 8
        assert len([t for t in tasks if t["state"] == "PENDING_NODE_ASSIGNMENT"]) == 0
        assert len([t for t in tasks if t["state"] == "PENDING_ARGS_AVAIL"]) == 0
        assert len([t for t in tasks if t["state"] == "RUNNING"]) == 2
        assert len(list_tasks(filters=[("actor_id", "=", actor_id)])) == 11
        assert len(list_tasks(filters=[("actor_id", "!=", actor_id)])) == 0
        return True

    wait_for_condition(verify)
    print(list_tasks())


def test_list_get_objects(shutdown_only):
    ray.init()
    data = np.ones(50 * 1024 * 1024, dtype=np.uint8)
    plasma_obj = ray.put(data)

    @ray.remote
    def f(obj):
        print(obj)

    ray.get(f.remote(plasma_obj))

    def verify():
        obj = list_objects()[0]
        assert obj["object_id"] == plasma_obj.hex()

        obj = list_objects(detail=True)[0]
        got_objs = get_objects(plasma_obj.hex())
        assert len(got_objs) == 1
        assert obj == got_objs[0]
        return True

    wait_for_condition(verify)
    print(list_objects())


def test_limit(shutdown_only):
    ray.init()

    @ray.remote
    class A:
        def ready(self):
            pass

    actors = [A.remote() for _ in range(4)]
    ray.get([actor.ready.remote() for actor in actors])

    output = list_actors(limit=2)
    assert len(output) == 2
    assert output == list_actors(limit=2)


def test_get_actor_timeout_multiplier(shutdown_only):
    @ray.remote
    class TestActor:
        def ready(self):
            pass

    actor = TestActor.remote()
    ray.get(actor.ready.remote())

    test_timeout = 1
    get_options = GetApiOptions(timeout=test_timeout)
    list_options = ListApiOptions(timeout=test_timeout)
    assert get_options.timeout == list_options.timeout

    actors = list_actors()
    actor_id = actors[0]["actor_id"]
    result = get_actor(actor_id, timeout=1)
    assert result["actor_id"] == actor_id


def test_filter(shutdown_only):
    ray.init()

    with pytest.raises(ValueError):
        list_actors(filters=[("state", ">", "DEAD")])

    @ray.remote
    class Actor:
        def __init__(self):
            self.obj = None

        def ready(self):
            pass

        def put(self):
            self.obj = ray.put(123)

        def getpid(self):
            import os

            return os.getpid()

    a = Actor.remote()
    b = Actor.remote()
    a_pid = ray.get(a.getpid.remote())
    b_pid = ray.get(b.getpid.remote())
    ray.get([a.ready.remote(), b.ready.remote()])
    ray.kill(b)

    def verify():
        result = list_actors(filters=[("state", "=", "DEAD")])
        assert len(result) == 1
        assert result[0]["pid"] == b_pid
        result = list_actors(filters=[("state", "!=", "DEAD")])
        assert len(result) == 1
        assert result[0]["pid"] == a_pid
        return True

    wait_for_condition(verify)

    obj_1 = ray.put(123)  # noqa
    ray.get(a.put.remote())
    pid = ray.get(a.getpid.remote())

    def verify():
        result = list_objects(filters=[("pid", "=", pid), ("reference_type", "=", "LOCAL_REFERENCE")])
        return len(result) == 1

    wait_for_condition(verify)

    def verify():
        workers = list_workers()
        live_workers = list_workers(filters=[("is_alive", "=", "true")])
        non_alive_workers = list_workers(filters=[("is_alive", "!=", "true")])
        assert len(live_workers) + len(non_alive_workers) == len(workers)
        live_workers = list_workers(filters=[("is_alive", "=", "1")])
        non_alive_workers = list_workers(filters=[("is_alive", "!=", "1")])
        assert len(live_workers) + len(non_alive_workers) == len(workers)
        live_workers = list_workers(filters=[("is_alive", "=", "True")])
        non_alive_workers = list_workers(filters=[("is_alive", "!=", "True")])
        assert len(live_workers) + len(non_alive_workers) == len(workers)
        return True

    wait_for_condition(verify)


def test_detail(shutdown_only):
    ray.init(num_cpus=1)

    @ray.remote
    class Actor:
        def ready(self):
            pass

    a = Actor.remote()
    ray.get(a.ready.remote())

    actor_state = list_actors()[0]
    actor_state_in_detail = list_actors(detail=True)[0]
    assert set(actor_state.keys()) == ActorState.base_columns()
    assert set(actor_state_in_detail.keys()) == ActorState.columns()


@phalanx_differs("an actor's repr_name is not recorded")
def test_actor_repr_name(shutdown_only):
    def _verify_repr_name(id, name):
        actor = get_actor(id=id)
        assert actor is not None
        assert actor["repr_name"] == name
        return True

    @ray.remote
    class ReprActor:
        def __init__(self, x) -> None:
            self.x = x

        def __repr__(self) -> str:
            return self.x

        def ready(self):
            pass

    a = ReprActor.remote(x="repr-name-a")
    b = ReprActor.remote(x="repr-name-b")
    wait_for_condition(_verify_repr_name, id=a._actor_id.hex(), name="repr-name-a")
    wait_for_condition(_verify_repr_name, id=b._actor_id.hex(), name="repr-name-b")

    @ray.remote
    class Actor:
        pass

    a = Actor.remote()
    wait_for_condition(_verify_repr_name, id=a._actor_id.hex(), name="")


def test_ray_timeline(shutdown_only):
    ray.init(num_cpus=8)

    @ray.remote
    def f():
        pass

    ray.get(f.remote())
    with tempfile.TemporaryDirectory() as tmpdirname:
        filename = os.path.join(tmpdirname, "timeline.json")
        ray.timeline(filename)
        import json

        with open(filename, "r") as f:
            dumped = json.load(f)
        assert len(dumped) > 0


@phalanx_differs("a task waiting for its arguments is not told from one waiting for a node (no PENDING_ARGS_AVAIL)")
def test_task_summary(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address)
    cluster.add_node(num_cpus=2)

    @ray.remote
    def run_long_time_task():
        time.sleep(30)
        return True

    @ray.remote
    def task_wait_for_dep(dep):
        print(dep)

    a = task_wait_for_dep.remote(run_long_time_task.remote())  # noqa
    b = task_wait_for_dep.remote(run_long_time_task.remote())  # noqa

    def verify():
        task_summary = summarize_tasks()
        task_summary = task_summary["cluster"]["summary"]
        assert "task_wait_for_dep" in task_summary
        assert "run_long_time_task" in task_summary
        assert task_summary["task_wait_for_dep"]["state_counts"]["PENDING_ARGS_AVAIL"] == 2
        assert task_summary["run_long_time_task"]["state_counts"]["RUNNING"] == 2
        assert task_summary["task_wait_for_dep"]["type"] == "NORMAL_TASK"
        return True

    wait_for_condition(verify)


def test_actor_summary(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address)
    cluster.add_node(num_cpus=2)

    @ray.remote(num_gpus=1)
    class Infeasible:
        pass

    @ray.remote(num_cpus=2)
    class Actor:
        pass

    infeasible = Infeasible.remote()  # noqa
    running = [Actor.remote() for _ in range(2)]  # noqa
    pending = Actor.remote()  # noqa

    def verify():
        summary = summarize_actors()
        summary = summary["cluster"]["summary"]
        actor_summary = None
        infeasible_summary = None
        for actor_class_name, s in summary.items():
            # (Ray names the class "Actor", older Ray "module.Actor")
            if actor_class_name.rsplit(".", 1)[-1] == "Actor":
                actor_summary = s
            elif actor_class_name.rsplit(".", 1)[-1] == "Infeasible":
                infeasible_summary = s

        assert actor_summary["state_counts"]["PENDING_CREATION"] == 1
        assert actor_summary["state_counts"]["ALIVE"] == 2
        assert infeasible_summary["state_counts"]["PENDING_CREATION"] == 1
        return True

    wait_for_condition(verify)
