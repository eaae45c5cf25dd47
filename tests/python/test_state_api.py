"""phalanx.util.state (Ray's state API) and `phalanx list|get|summary|logs`, on real clusters: each list,
get and summary over live actors, tasks, objects, nodes, placement groups, jobs and workers; filters,
limit and detail as Ray's; the CLI's printed table, YAML and JSON (docs/observability.md, "The state API")."""
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
import yaml

import phalanx
from phalanx import scripts
from phalanx.job.table import JobTable
from phalanx.util.placement_group import placement_group, remove_placement_group
from phalanx.util.state import (StateApiClient, get_actor, get_job, get_log, get_node, get_objects,
                                get_placement_group, get_task, get_worker, list_actors, list_jobs, list_logs,
                                list_nodes, list_objects, list_placement_groups, list_runtime_envs, list_tasks,
                                list_workers, summarize_actors, summarize_objects, summarize_tasks)
from phalanx.util.state.cli import parse_filter
from phalanx.util.state.common import ActorState, ListApiOptions, TaskState
from phalanx.util.state.exception import RayStateApiException

from conftest import wait_until


@phalanx.remote
def sleeper(seconds):
    time.sleep(seconds)
    return seconds


@phalanx.remote
def fails():
    raise ValueError("boom from fails")


@phalanx.remote
class Keeper:
    def __init__(self):
        self.obj = None

    def pid(self):
        return os.getpid()

    def keep(self):
        self.obj = phalanx.put(123)

    def say(self, text):
        print(text, flush=True)


def _one(rows, **match):
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, rows)
    return found[0]


def test_actors_are_listed_got_and_filtered(fresh_cluster):
    fresh_cluster(num_cpus=2)
    a = Keeper.options(name="keeper", namespace="ns1").remote()
    pid = phalanx.get(a.pid.remote())
    unplaced = Keeper.options(num_gpus=1).remote()
    job_id = phalanx.get_runtime_context().get_job_id()

    actor = _one(list_actors(filters=[("actor_id", "=", a._actor_id.hex())]))
    assert (actor.state, actor["state"], actor.class_name, actor.name) == ("ALIVE", "ALIVE", "Keeper", "keeper")
    assert (actor.job_id, actor.pid, actor.ray_namespace) == (job_id, pid, "ns1")
    assert actor.node_id == phalanx.get_node_id()
    assert actor.required_resources is None  # (a detail column: without detail=True, None)
    wait_until(lambda: get_actor(unplaced._actor_id.hex()) is not None, what="the unplaced actor registered")
    pending = _one(list_actors(filters=[("actor_id", "=", unplaced._actor_id.hex())]))
    assert (pending.state, pending.node_id, pending.pid) == ("PENDING_CREATION", None, 0)
    for full in list_actors(detail=True):
        assert get_actor(full.actor_id) == full
    assert get_actor("ab" * 16) is None

    phalanx.kill(a)
    wait_until(lambda: len(list_actors(filters=[("state", "=", "DEAD")])) == 1, what="the killed actor DEAD")
    dead = get_actor(a._actor_id.hex())
    assert dead.death_cause["actor_died_error_context"]["error_message"]
    assert [x.actor_id for x in list_actors(filters=[("state", "!=", "dead")])] == [unplaced._actor_id.hex()]
    assert list_actors(filters=[("ray_namespace", "=", "NS1")])[0].actor_id == a._actor_id.hex()


def test_tasks_show_queued_running_finished_and_failed_each_with_its_node(fresh_cluster):
    fresh_cluster(num_cpus=1)
    done = sleeper.remote(0)
    phalanx.get(done)
    failing = fails.remote()  # (held: a failed task's error is recorded while its result is held)
    with pytest.raises(ValueError):
        phalanx.get(failing)
    running, queued = sleeper.remote(60), sleeper.remote(60)
    job_id = phalanx.get_runtime_context().get_job_id()

    def states():
        return {t.task_id: t for t in list_tasks(detail=True)}
    wait_until(lambda: states().get(running.task_id().hex(), {}).get("state") == "RUNNING", what="a running task")
    tasks = states()
    assert tasks[done.task_id().hex()].state == "FINISHED"
    waiting = tasks[queued.task_id().hex()]  # (queued at the node, or handed to the busy worker behind the first)
    assert (waiting.state, waiting.start_time_ms) in (("PENDING_NODE_ASSIGNMENT", None), ("SUBMITTED_TO_WORKER", None))
    assert waiting.node_id is None or waiting.state == "SUBMITTED_TO_WORKER"
    run = tasks[running.task_id().hex()]
    assert (run.node_id, run.job_id, run.type, run.func_or_class_name) == (phalanx.get_node_id(), job_id,
                                                                            "NORMAL_TASK", "sleeper")
    assert run.worker_pid and get_worker(run.worker_id).pid == run.worker_pid
    wait_until(lambda: "boom from fails" in (get_task(failing).error_message or ""), what="the error recorded")
    failed = _one(list_tasks(filters=[("state", "=", "FAILED")], detail=True))
    assert failed.name == "fails" and failed.task_id == failing.task_id().hex()
    assert get_task(running) == run and get_task(running.task_id().hex()) == run
    assert get_task("cd" * 16) is None
    assert {t.state for t in list_tasks(filters=[("job_id", "=", job_id), ("state", "!=", "FINISHED")])} == \
        {"RUNNING", waiting.state, "FAILED"}


def test_an_actors_creation_and_calls_are_its_tasks(cluster):
    a = Keeper.remote()
    pid = phalanx.get(a.pid.remote())
    phalanx.get([a.pid.remote() for _ in range(3)])
    actor_id = a._actor_id.hex()

    def mine():
        return [t for t in list_tasks(filters=[("actor_id", "=", actor_id)]) if t.state == "FINISHED"]
    wait_until(lambda: len(mine()) == 5, what="the creation and 4 calls listed")
    creation = _one(mine(), type="ACTOR_CREATION_TASK")
    assert (creation.task_id, creation.name, creation.worker_pid) == (actor_id, "Keeper.__init__", pid)
    calls = [t for t in mine() if t.type == "ACTOR_TASK"]
    assert {t.func_or_class_name for t in calls} == {"Keeper.pid"} and {t.worker_pid for t in calls} == {pid}


def test_objects_are_listed_per_holder_largest_first(fresh_cluster):
    fresh_cluster(num_cpus=2)
    big = phalanx.put(b"x" * (4 << 20))
    small = phalanx.put(1)
    a = Keeper.remote()
    pid = phalanx.get(a.pid.remote())
    phalanx.get(a.keep.remote())

    first = list_objects()[0]
    assert (first.object_id, first.reference_type, first.type, first.pid) == (big.hex(), "LOCAL_REFERENCE", "DRIVER",
                                                                               os.getpid())
    assert first.object_size > 4 << 20 and first.task_status == "FINISHED" and first.call_site == "disabled"
    assert [o.object_id for o in get_objects(small.hex())] == [small.hex()]
    assert get_objects("ef" * 20) == []
    handles = list_objects(filters=[("reference_type", "=", "ACTOR_HANDLE")])
    assert {o.object_id[:32] for o in handles} == {a._actor_id.hex()}
    wait_until(lambda: len(list_objects(filters=[("pid", "=", str(pid)), ("reference_type", "=", "LOCAL_REFERENCE")]))
               == 1, what="the ref the actor's worker holds")


def test_nodes_and_placement_groups(fresh_cluster):
    fresh_cluster(num_cpus=2)
    node = _one(list_nodes(detail=True))
    assert (node.node_id, node.state, node.is_head_node, node.node_ip) == (phalanx.get_node_id(), "ALIVE", True,
                                                                            "127.0.0.1")
    assert node.resources_total["CPU"] == 2.0 and node.end_time_ms == 0 and get_node(node.node_id) == node
    assert node.node_name == phalanx.nodes()[0]["NodeName"]
    assert get_node("00" * 16) is None

    pg = placement_group([{"CPU": 1}], name="grp")
    phalanx.get(pg.ready(), timeout=30)
    too_big = placement_group([{"CPU": 64}])
    job_id = phalanx.get_runtime_context().get_job_id()
    group = get_placement_group(pg.id.hex())
    assert (group.name, group.state, group.creator_job_id, group.is_detached) == ("grp", "CREATED", job_id, False)
    assert group.bundles == [{"bundle_id": {"placement_group_id": pg.id.hex(), "bundle_index": 0},
                              "node_id": node.node_id, "unit_resources": {"CPU": 1.0}, "label_selector": {}}]
    wait_until(lambda: get_placement_group(too_big.id.hex()) is not None, what="the unplaced group recorded")
    assert get_placement_group(too_big.id.hex()).state == "PENDING"
    remove_placement_group(pg)
    wait_until(lambda: get_placement_group(pg.id.hex()).state == "REMOVED", what="the removed group")
    assert [g.placement_group_id for g in list_placement_groups(filters=[("state", "=", "PENDING")])] == \
        [too_big.id.hex()]


def test_jobs_list_drivers_and_submissions(fresh_cluster):
    info = fresh_cluster(num_cpus=1, runtime_env={"env_vars": {"STATE_API_TEST": "1"}})
    job_id = phalanx.get_runtime_context().get_job_id()
    me = _one(list_jobs(detail=True), job_id=job_id)
    assert (me.type, me.status, me.driver_info["pid"], me.submission_id) == ("DRIVER", "RUNNING", str(os.getpid()),
                                                                            None)
    assert me.runtime_env == {"env_vars": {"STATE_API_TEST": "1"}} and me.start_time > 0 and me.end_time is None
    env = _one(list_runtime_envs())
    assert env.runtime_env == {"env_vars": {"STATE_API_TEST": "1"}} and env.node_id == phalanx.get_node_id()

    script = f"import phalanx\nphalanx.init(address={info['gcs_address']!r})\nphalanx.shutdown()\n"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    other = _one(list_jobs(filters=[("job_id", "!=", job_id), ("type", "=", "driver")], detail=True))
    assert other.status == "SUCCEEDED" and other.end_time >= other.start_time

    JobTable(info["gcs_address"]).add({"submission_id": "sub_1", "entrypoint": "python x.py", "status": "PENDING",
                                       "message": "waiting", "submit_time": int(time.time() * 1000)})
    sub = get_job("sub_1")
    assert (sub.type, sub.status, sub.entrypoint, sub.job_id) == ("SUBMISSION", "PENDING", "python x.py", None)
    assert [j.submission_id for j in list_jobs(filters=[("type", "=", "SUBMISSION")])] == ["sub_1"]


def test_workers_are_the_drivers_and_worker_processes(fresh_cluster):
    fresh_cluster(num_cpus=2)
    a = Keeper.remote()
    pid = phalanx.get(a.pid.remote())
    workers = list_workers(detail=True)
    me = _one(workers, pid=os.getpid())
    assert (me.worker_type, me.is_alive, me.node_id, me.end_time_ms) == ("DRIVER", True, phalanx.get_node_id(), 0)
    actor_worker = _one(workers, pid=pid)
    assert actor_worker.worker_type == "WORKER" and get_worker(actor_worker.worker_id) == actor_worker
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: pid in [w.pid for w in list_workers(filters=[("is_alive", "=", "false")])],
               what="the killed worker listed as not alive")
    assert get_worker(actor_worker.worker_id).end_time_ms is None  # (when it exited is not known here)
    alive, dead = list_workers(filters=[("is_alive", "=", "1")]), list_workers(filters=[("is_alive", "!=", "True")])
    assert {w.worker_id for w in alive} | {w.worker_id for w in dead} == {w.worker_id for w in list_workers()}


def test_filters_are_checked_as_rays(cluster):
    with pytest.raises(RayStateApiException, match=r"filter column stat is not supported.*'state'"):
        list_actors(filters=[("stat", "=", "DEAD")])
    with pytest.raises(ValueError, match="Unsupported filter predicate > is given. Available predicates: =, !="):
        list_actors(filters=[("state", ">", "DEAD")])
    with pytest.raises(ValueError, match="Provide \\(key, predicate, value\\) tuples"):
        list_tasks(filters=[("state", "=")])
    assert list_actors(filters=[("state", "=", "ALIVE"), ("state", "=", "DEAD")]) == []  # (conflicting)
    assert parse_filter("key!=value=1") == ("key", "!=", "value=1")
    assert parse_filter("key=value!=1") == ("key", "=", "value!=1")
    with pytest.raises(ValueError):
        parse_filter("key>value")
    assert ListApiOptions(filters=[("name", "=", "a"), ("name", "=", "b")]).has_conflicting_filters()


def test_limit_detail_and_warnings(fresh_cluster):
    fresh_cluster(num_cpus=1)
    actors = [Keeper.options(num_cpus=0).remote() for _ in range(4)]
    phalanx.get([x.pid.remote() for x in actors])
    two = list_actors(limit=2)
    assert len(two) == 2 and two == list_actors(limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list_actors(limit=2, _explain=True)
    assert any("Limit last 2 entries (Total 4)" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="limit must be an int >= 1"):
        list_actors(limit=0)
    with pytest.raises(RayStateApiException, match="exceeds the supported limit"):
        list_actors(limit=10**9)
    brief, full = list_actors()[0], list_actors(detail=True)[0]
    assert set(brief.keys()) == ActorState.base_columns() and set(full.keys()) == ActorState.columns()
    assert brief.num_restarts is None and full.num_restarts == 0 and dict(full)["actor_id"] == full.actor_id
    assert set(list_tasks(detail=True)[0].keys()) == TaskState.columns()


def test_summaries_count_by_name_class_and_call_site(fresh_cluster):
    fresh_cluster(num_cpus=1)
    phalanx.get([sleeper.remote(0) for _ in range(3)])
    a = Keeper.remote()
    phalanx.get(a.pid.remote())
    keep = phalanx.put(b"y" * 1000)  # noqa: F841 (held while summarized)

    def tasks():
        return summarize_tasks()["cluster"]
    wait_until(lambda: tasks()["summary"].get("sleeper", {}).get("state_counts") == {"FINISHED": 3},
               what="three finished sleepers counted")
    s = tasks()
    assert s["summary"]["sleeper"]["type"] == "NORMAL_TASK" and s["total_tasks"] == 3
    assert s["total_actor_scheduled"] == 1 and s["total_actor_tasks"] == 1 and s["summary_by"] == "func_name"
    actors = summarize_actors()["cluster"]
    assert actors == {"summary": {"Keeper": {"class_name": "Keeper", "state_counts": {"ALIVE": 1}}},
                      "total_actors": 1, "summary_by": "class"}
    objects = summarize_objects()["cluster"]
    assert objects["callsite_enabled"] is False and objects["summary"]["disabled"]["total_objects"] >= 2
    assert json.loads(json.dumps(objects)) == objects


def test_cli_prints_tables_yaml_and_json(cluster, capsys):
    a = Keeper.remote()
    phalanx.get(a.pid.remote())
    actor_id = a._actor_id.hex()
    capsys.readouterr()

    assert scripts.main(["list", "actors"]) == 0
    out = capsys.readouterr().out
    assert "Stats:" in out and "Table:" in out and "ACTOR_ID" in out and actor_id in out
    assert scripts.main(["list", "actors", "--format", "json"]) == 0
    assert actor_id in {x["actor_id"] for x in json.loads(capsys.readouterr().out)}
    assert scripts.main(["list", "actors", "--detail"]) == 0  # (YAML with --detail)
    assert any(x["actor_id"] == actor_id and "required_resources" in x
               for x in yaml.safe_load(capsys.readouterr().out))
    assert scripts.main(["list", "tasks", "--filter", "type=ACTOR_TASK", "--format", "yaml"]) == 0
    assert {x["type"] for x in yaml.safe_load(capsys.readouterr().out)} == {"ACTOR_TASK"}
    assert scripts.main(["list", "nodes", "--format", "table", "--limit", "1"]) == 0
    assert "NODE_ID" in capsys.readouterr().out
    assert scripts.main(["get", "actors", actor_id]) == 0
    assert yaml.safe_load(capsys.readouterr().out)[0]["actor_id"] == actor_id
    assert scripts.main(["get", "actors", "1234"]) == 0
    assert "Resource with id=1234 not found in the cluster." in capsys.readouterr().out
    assert scripts.main(["get", "actors"]) == 2
    assert "Do you mean 'phalanx list actors'" in capsys.readouterr().err
    assert scripts.main(["list", "actors", "--filter", "stat=DEAD"]) == 1
    assert "Supported filter columns" in capsys.readouterr().err
    assert scripts.main(["summary", "actors"]) == 0
    out = capsys.readouterr().out
    assert "Actors Summary" in out and "Keeper" in out and "total_actors" in out
    assert scripts.main(["summary", "tasks"]) == 0
    assert "Keeper.pid" in capsys.readouterr().out
    assert scripts.main(["summary", "objects"]) == 0
    assert "callsite_enabled: false" in capsys.readouterr().out


def test_logs_of_nodes_actors_and_workers(fresh_cluster, capsys):
    fresh_cluster(num_cpus=1)
    a = Keeper.remote()
    pid = phalanx.get(a.pid.remote())
    phalanx.get(a.say.remote("marker-of-the-state-api-test"))
    node_id = phalanx.get_node_id()
    files = list_logs(node_id=node_id)
    assert files["raylet"] and files["worker"] and files["gcs_server"] == ["redis.log"]
    raylet = files["raylet"][0]
    assert "listening on" in "".join(get_log(node_id=node_id, filename=raylet, tail=-1))
    with pytest.raises(ValueError, match="names no file"):
        list(get_log(node_id=node_id, filename="../token"))
    wait_until(lambda: "marker-of-the-state-api-test" in "".join(get_log(actor_id=a._actor_id.hex())),
               what="the actor's line in its log")
    assert "marker-of-the-state-api-test" in "".join(get_log(pid=pid, node_id=node_id, tail=5))
    capsys.readouterr()
    assert scripts.main(["logs"]) == 0
    assert raylet in capsys.readouterr().out
    assert scripts.main(["logs", "raylet*", "--tail", "-1"]) == 0
    assert "listening on" in capsys.readouterr().out
    assert scripts.main(["logs", "actor", "--id", a._actor_id.hex()]) == 0
    assert "marker-of-the-state-api-test" in capsys.readouterr().out
    assert scripts.main(["logs", "worker", "--pid", str(pid), "--tail", "2"]) == 0
    assert "truncated to last 2 lines" in capsys.readouterr().out


def test_a_process_not_connected_reads_through_a_raylet_and_is_no_job(fresh_cluster):
    info = fresh_cluster(num_cpus=1)
    ref = sleeper.remote(60)
    wait_until(lambda: get_task(ref) is not None and get_task(ref).state == "RUNNING", what="the task running")
    code = (f"from phalanx.util.state import list_tasks, list_objects, list_jobs\n"
            f"a = {info['gcs_address']!r}\n"
            f"print([t.state for t in list_tasks(address=a)], len(list_objects(address=a)), "
            f"[j.type for j in list_jobs(address=a)])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "['RUNNING'] 1 ['DRIVER']"


def test_address_forms(cluster):
    assert StateApiClient().address == StateApiClient("auto").address == cluster["gcs_address"]
    assert list_nodes(address=cluster["gcs_address"])[0].node_id == phalanx.get_node_id()
    with pytest.raises(ValueError, match="give its HOST:PORT"):
        list_nodes(address="http://127.0.0.1:8265")
    with pytest.raises(ValueError, match="Can't get RUNTIME_ENVS by id"):
        StateApiClient().get("runtime_envs", "x", None)
