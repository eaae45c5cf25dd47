"""Rows of the resources the GCS alone describes: nodes, actors, placement groups, jobs and runtime
environments, each a dict of its schema's columns (common.py), every column filled.

Where each column comes from, and what is not known here (filled as Ray fills what it does not know):
- nodes: the node table. node_name is the address (as phalanx.nodes()' NodeName); the head is the
  node started first; labels {}; state_message of a dead node says when its last heartbeat was (why it
  died is not recorded); end_time_ms is 0 while alive, else the last heartbeat.
- actors: the actor table. job_id and ray_namespace from the creating driver's record (an actor
  made by a task, not a driver, has job_id None and its namespace only when named); a detached
  actor's own spec gives its job, namespace and placement group. PENDING is Ray's PENDING_CREATION
  (node_id None: not placed yet; DEPENDENCIES_UNREADY is not told apart). A dead actor's pid, which
  the actor table clears, is its creation's worker as the raylet recorded it (Sources, when a raylet
  of this machine can be asked and the record is in its ring; else 0). repr_name and
  serialized_runtime_env are None (not recorded); placement_group_id is None but for detached actors;
  death_cause is Ray's {"actor_died_error_context": {...}} with phalanx's words.
- placement groups: the group table (removed ones too). creator_job_id from the creating driver's
  record; stats holds scheduling_state (and why_pending, phalanx's) only.
- jobs: the submitted jobs' records (type SUBMISSION) and the drivers' records (type DRIVER; a
  submitted job's driver is its job's driver_info). A driver that ended without shutdown() is FAILED
  when its node is dead or it ran on this machine and is gone; elsewhere it shows RUNNING.
- runtime environments: what each job was given (its driver's init(runtime_env=) or the
  submission's), on the driver's node. Whether and when each worker set it up is not recorded here:
  success is True, creation_time_ms, ref_cnt and error None."""
import datetime

from phalanx.util.state.directory import pid_alive

_ACTOR_STATES = {"PENDING": "PENDING_CREATION", "ALIVE": "ALIVE", "RESTARTING": "RESTARTING", "DEAD": "DEAD"}
_PG_SCHEDULING = {"CREATED": "FINISHED", "REMOVED": "REMOVED", "RESCHEDULING": "QUEUED"}


def _iso_ms(ms):
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="seconds")


def nodes(table):
    head = min(table, key=lambda n: n["start_time_ms"])["node_id"] if table else None
    rows = []
    for n in table:
        rows.append({"node_id": n["node_id"], "node_ip": n["address"], "is_head_node": n["node_id"] == head,
                     "state": "ALIVE" if n["alive"] else "DEAD",
                     "state_message": None if n["alive"] else f"its last heartbeat was at {_iso_ms(n['heartbeat_ms'])}",
                     "node_name": n["address"], "resources_total": dict(n["resources_total"]),
                     "labels": dict(n.get("labels") or {}),
                     "start_time_ms": n["start_time_ms"], "end_time_ms": 0 if n["alive"] else n["heartbeat_ms"]})
    return rows


def _namespace_and_name(actor, driver):
    ns, _, short = actor["name"].rpartition("/")  # (registered as "namespace/name")
    if not ns:
        ns = actor["spec"].get("namespace") or (driver["namespace"] if driver else None)
    return ns or None, short


def _death_cause(a, directory):
    if a["state"] != "DEAD":
        return None
    return {"actor_died_error_context": {"error_message": a["death_cause"], "actor_id": a["actor_id"],
                                         "class_name": a["class_name"].rsplit(".", 1)[-1], "pid": a["pid"],
                                         "node_ip_address": directory.node_ip(a["node_id"]),
                                         "name": a["name"].rpartition("/")[2]}}


def actors(table, directory):
    rows = []
    for a in table:
        driver = directory.driver_of(a["actor_id"])
        namespace, name = _namespace_and_name(a, driver)
        placed = a["state"] != "PENDING" or a["pid"]
        rows.append({"actor_id": a["actor_id"], "class_name": a["class_name"].rsplit(".", 1)[-1],
                     "state": _ACTOR_STATES[a["state"]],
                     "job_id": a["spec"].get("job_id") or (driver["job_id"] if driver else None),
                     "name": name, "node_id": (a["node_id"] or None) if placed else None, "pid": a["pid"],
                     "ray_namespace": namespace, "serialized_runtime_env": None,
                     "required_resources": dict(a["resources"]), "death_cause": _death_cause(a, directory),
                     "is_detached": a["detached"], "placement_group_id": a["spec"].get("placement_group_id") or None,
                     "repr_name": None, "num_restarts": a["restarts"],
                     "num_restarts_due_to_lineage_reconstruction": 0})
    return rows


def placement_groups(table, directory):
    rows = []
    for g in table:
        pg_id = g["placement_group_id"]
        scheduling = _PG_SCHEDULING.get(g["state"], "NO_RESOURCES" if g["why_pending"] else "QUEUED")
        stats = {"scheduling_state": scheduling}
        if g["why_pending"]:
            stats["why_pending"] = g["why_pending"]
        rows.append({"placement_group_id": pg_id, "name": g["name"],
                     "creator_job_id": directory.job_of(g["creator_id"] or pg_id), "state": g["state"],
                     "bundles": [{"bundle_id": {"placement_group_id": pg_id, "bundle_index": i},
                                  "node_id": b["node_id"] or None, "unit_resources": dict(b["resources"]),
                                  "label_selector": {}} for i, b in enumerate(g["bundles"])],
                     "is_detached": g["detached"], "stats": stats})
    return rows


def _driver_info(d, directory):
    return {"id": d["job_id"], "node_ip_address": directory.node_ip(d["node_id"]), "pid": str(d["pid"])}


def _driver_status(d, directory):
    """(status, message) of a driver's job."""
    if d.get("end_time"):
        return "SUCCEEDED", "the driver called shutdown()"
    if not directory.node_alive(d["node_id"]):
        return "FAILED", "the driver's node is dead and it did not call shutdown()"
    if directory.is_local(d["node_id"]) and not pid_alive(d["pid"]):
        return "FAILED", f"the driver (pid {d['pid']}) exited without shutdown()"
    return "RUNNING", ""


def jobs(submitted, directory):
    by_submission = {}
    for d in sorted(directory.drivers, key=lambda d: d["start_time"]):
        if d.get("submission_id"):
            by_submission[d["submission_id"]] = d  # (the newest driver of a submission)
    rows = []
    for s in submitted:
        d = by_submission.get(s["submission_id"])
        rows.append({"job_id": d["job_id"] if d else None, "submission_id": s["submission_id"],
                     "entrypoint": s["entrypoint"], "type": "SUBMISSION", "status": s["status"],
                     "message": s.get("message", ""), "error_type": None,
                     "driver_info": _driver_info(d, directory) if d else None,
                     "start_time": s.get("start_time") or s.get("submit_time"), "end_time": s.get("end_time"),
                     "metadata": s.get("metadata") or {}, "runtime_env": s.get("runtime_env") or {},
                     "driver_agent_http_address": None, "driver_node_id": d["node_id"] if d else None,
                     "driver_exit_code": s.get("driver_exit_code")})
    for d in directory.drivers:
        if d.get("submission_id"):
            continue
        status, message = _driver_status(d, directory)
        rows.append({"job_id": d["job_id"], "submission_id": None, "entrypoint": d["entrypoint"], "type": "DRIVER",
                     "status": status, "message": message, "error_type": None,
                     "driver_info": _driver_info(d, directory), "start_time": d["start_time"],
                     "end_time": d.get("end_time"), "metadata": {}, "runtime_env": d.get("runtime_env") or {},
                     "driver_agent_http_address": None, "driver_node_id": d["node_id"], "driver_exit_code": None})
    return rows


def runtime_envs(submitted, directory):
    rows = []
    drivers_of = {d.get("submission_id"): d for d in directory.drivers if d.get("submission_id")}
    envs = [(d.get("runtime_env"), d["node_id"]) for d in directory.drivers if not d.get("submission_id")]
    envs += [(s.get("runtime_env"), drivers_of[s["submission_id"]]["node_id"] if s["submission_id"] in drivers_of
              else None) for s in submitted]
    for env, node_id in envs:
        if env:
            rows.append({"runtime_env": env, "success": True, "creation_time_ms": None, "node_id": node_id,
                         "ref_cnt": None, "error": None})
    return rows
