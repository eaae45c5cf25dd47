"""Rows of tasks and workers, from what the raylets record (the timeline's rings of every live node,
docs/observability.md) and the GCS's task records, each a dict of its schema's columns.

Tasks. A task through a raylet: that raylet's record (queued, the worker it ran on, run, end,
failed; while held: queued or running, "in flight"), the node that ran it when it was spilled. A
direct actor call (sent straight to the actor's worker): the worker's record, once it ended. An ended
task whose results are still held: its GCS record (attempt, error, node, end). States: queued is
Ray's PENDING_NODE_ASSIGNMENT (a task waiting for its arguments is not told apart: no
PENDING_ARGS_AVAIL), SUBMITTED_TO_WORKER when handed to a worker that runs another task first, then
RUNNING, FINISHED or FAILED; an actor's creation is FINISHED once its constructor ended; an actor call
given to the actor's worker through the raylet is RUNNING (the raylet does not say which of them an
actor's worker has started). Not known here: a direct actor call before it ends (queued or running at the
actor), the attempts of a retry_exceptions task (its retries run inside one run of its worker: one
attempt), parent_task_id, required_resources, runtime_env_info, placement_group_id, error_type,
profiling_data, task_log_info (None); job_id when the task was submitted by a task, not a driver
(None); actor_id of an actor call not yet given to the actor's worker (None). Records are of the last
WINDOW_S seconds, as many as each ring holds (65,536 per raylet, 16,384 per worker).

Workers. Every process with a ring (the worker processes of each node: their rings outlive them, the
raylet keeps the newest 32 of exited ones) and every driver whose record has not ended. is_alive:
exact on this machine's nodes (the process is looked up); on another machine's, that its node is
alive. Not known here: exit_type, exit_detail, end_time_ms of an exited worker (None); the launch
times (-1, Ray's "not recorded")."""
from phalanx._private import timeline
from phalanx.util.state.directory import pid_alive, worker_id

WINDOW_S = 3600.0


def _is_actor_call(task_hex):
    counter = int.from_bytes(bytes.fromhex(task_hex[16:32]), "little")
    return counter & 1 == 0 and counter & 2 != 0


def _ms(ns):
    return int(ns // 1_000_000)


def _records(trace_nodes):
    """{task id: [record]}: each TASK (raylet) and EXEC (worker) record as a dict, times in ms on the
    asking node's clock."""
    out = {}
    for n in trace_nodes:
        shift = n["offset_ns"]
        for ring in n["rings"]:
            recs = ring["records"]
            for r in recs[(recs["kind"] == timeline.TASK) | (recs["kind"] == timeline.EXEC)]:
                kind, flags = int(r["kind"]), int(r["flags"])
                raylet = kind == timeline.TASK
                rec = {"raylet": raylet, "node_id": n["node_id"], "name": r["name"].decode(errors="replace"),
                       "queued": _ms(int(r["ts"]) + shift), "end": _ms(int(r["ts"]) + int(r["dur"]) + shift),
                       "failed": bool(flags & timeline.FAILED), "in_flight": bool(flags & timeline.IN_FLIGHT),
                       "pid": int(r["b"]) if raylet else ring["pid"], "sent": False}
                rec["start"] = (_ms(int(r["a"]) + shift) if r["a"] else None) if raylet else rec["queued"]
                rec["handed_ns"] = int(r["a"])  # (the order a worker was given its tasks in, to the ns)
                if raylet and not r["a"] and bytes(r["peer"]).strip(b"\0"):
                    rec["sent"] = True  # (sent to another node, whose own record says where it ran)
                out.setdefault(bytes(r["id"])[:16].hex(), []).append(rec)
    return out


def _attempts(recs):
    """The runs of one task, oldest first: its raylets' records (those of the node that ran it), else
    its workers' (a direct actor call's)."""
    raylet = sorted((r for r in recs if r["raylet"]), key=lambda r: r["queued"])
    here = [r for r in raylet if not r["sent"]]
    runs = here or raylet[-1:]
    return runs or sorted((r for r in recs if not r["raylet"]), key=lambda r: r["queued"])


def _names(raw, task_type):
    """(name, func_or_class_name) as Ray gives them: f, Class.method, Class.__init__ (phalanx's names are
    module-qualified; a name given with .options(name=) is kept whole)."""
    parts = raw.split(".")
    if task_type == "ACTOR_CREATION_TASK":
        name = parts[-1] + ".__init__"
    elif task_type == "ACTOR_TASK":
        name = ".".join(parts[-2:])
    else:
        name = parts[-1]
    return name, name


def worker_pids(trace_nodes):
    """{task id: the pid of the worker it last ran on} of the tasks the raylets recorded as handed to a
    worker (an actor's creation: its actor's worker, which the actor table forgets once the actor died)."""
    out = {}
    for task_id, recs in _records(trace_nodes).items():
        ran = sorted((r for r in recs if r["raylet"] and r["pid"]), key=lambda r: r["queued"])
        if ran:
            out[task_id] = ran[-1]["pid"]
    return out


class TaskRows:
    """Builds the task rows of one query."""

    def __init__(self, directory):
        self.directory = directory

    def _type(self, task_id):
        if task_id in self.directory.actors:
            return "ACTOR_CREATION_TASK"
        return "ACTOR_TASK" if _is_actor_call(task_id) else "NORMAL_TASK"

    def _state(self, run, execs, task_type, waiting):
        """(state, start, end) of one run; `waiting`: the runs handed to a worker busy with another."""
        if not run["raylet"]:
            return ("FAILED" if run["failed"] else "FINISHED"), run["start"], run["end"]
        if run["in_flight"]:
            if run["start"] is None:
                return "PENDING_NODE_ASSIGNMENT", None, None
            if id(run) in waiting:
                return "SUBMITTED_TO_WORKER", None, None
            if task_type == "ACTOR_CREATION_TASK":  # (held while the actor lives: its constructor's end says)
                done = [e for e in execs if e["pid"] == run["pid"] and e["node_id"] == run["node_id"]]
                if done:
                    return ("FAILED" if done[-1]["failed"] else "FINISHED"), run["start"], done[-1]["end"]
            return "RUNNING", run["start"], None
        return ("FAILED" if run["failed"] else "FINISHED"), run["start"], run["end"]

    def _actor_id(self, task_id, task_type, node_id, pid):
        if task_type == "ACTOR_CREATION_TASK":
            return task_id
        if task_type == "ACTOR_TASK" and pid:
            actor = self.directory.actor_at(node_id, pid)
            return actor["actor_id"] if actor else None
        return None

    def _row(self, task_id, attempt, raw_name, state, node_id, pid, times, error):
        task_type = self._type(task_id)
        created, start, end = times
        placed = node_id if state != "PENDING_NODE_ASSIGNMENT" else None  # (SUBMITTED_TO_WORKER: its worker's)
        name, func = _names(raw_name, task_type)
        events = [{"state": s, "created_ms": t} for s, t in
                  (("PENDING_NODE_ASSIGNMENT", created), ("RUNNING", start), (state, end)) if t is not None]
        return {"task_id": task_id, "attempt_number": attempt, "name": name, "state": state,
                "job_id": self.directory.job_of(task_id),
                "actor_id": self._actor_id(task_id, task_type, placed, pid), "type": task_type,
                "func_or_class_name": func, "parent_task_id": None, "node_id": placed,
                "worker_id": worker_id(placed, pid) if placed and pid else None,
                "worker_pid": pid if placed and pid else None, "error_type": None, "language": "PYTHON",
                "required_resources": None, "runtime_env_info": None, "placement_group_id": None,
                "events": events, "profiling_data": None, "creation_time_ms": created, "start_time_ms": start,
                "end_time_ms": end, "task_log_info": None,
                "error_message": (error or None) if state == "FAILED" else None, "is_debugger_paused": None}

    def _waiting(self, traced):
        """The in-flight runs of tasks handed to a worker behind another task of its (a worker runs one
        task at a time, in the order given: the first handed of those in flight is the one running)."""
        by_worker = {}
        for task_id, recs in traced.items():
            if self._type(task_id) == "NORMAL_TASK":
                for r in recs:
                    if r["raylet"] and r["in_flight"] and r["start"] is not None:
                        by_worker.setdefault((r["node_id"], r["pid"]), []).append(r)
        return {id(r) for runs in by_worker.values() for r in sorted(runs, key=lambda r: r["handed_ns"])[1:]}

    def rows(self, trace_nodes, task_records):
        records = {r["task_id"]: r for r in task_records}
        traced = _records(trace_nodes)
        waiting = self._waiting(traced)
        rows = []
        for task_id, recs in traced.items():
            runs = _attempts(recs)
            execs = [r for r in recs if not r["raylet"]]
            kept = records.pop(task_id, None)
            first = kept["attempt"] - (len(runs) - 1) if kept else 0
            for i, run in enumerate(runs):
                state, start, end = self._state(run, execs, self._type(task_id), waiting)
                last = i == len(runs) - 1
                error = kept["error"] if kept and last else None
                if kept and last and state in ("FINISHED", "FAILED"):
                    state = kept["state"]
                rows.append(self._row(task_id, max(first + i, 0), run["name"], state, run["node_id"], run["pid"],
                                      (run["queued"], start, end), error))
        for task_id, r in records.items():  # (ended before the window, results still held)
            rows.append(self._row(task_id, r["attempt"], r["function_name"], r["state"], r["node_id"], 0,
                                  (None, None, r["finish_time_ms"] or None), r["error"]))
        return rows


def workers(trace_nodes, directory):
    rows, seen = [], set()

    def add(node_id, pid, worker_type, start_ms, alive):
        if (node_id, pid) in seen or not pid:
            return
        seen.add((node_id, pid))
        rows.append({"worker_id": worker_id(node_id, pid), "is_alive": alive, "worker_type": worker_type,
                     "exit_type": None, "node_id": node_id, "ip": directory.node_ip(node_id), "pid": pid,
                     "exit_detail": None, "worker_launch_time_ms": -1, "worker_launched_time_ms": -1,
                     "start_time_ms": start_ms, "end_time_ms": 0 if alive else None,
                     "debugger_port": None, "num_paused_threads": None})

    def alive(node_id, pid):
        return pid_alive(pid) if directory.is_local(node_id) else directory.node_alive(node_id)

    for d in directory.drivers:
        if not d.get("end_time"):
            add(d["node_id"], d["pid"], "DRIVER", d["start_time"], alive(d["node_id"], d["pid"]))
    for n in trace_nodes:
        for ring in n["rings"]:
            if ring["label"] == "worker":
                add(n["node_id"], ring["pid"], "WORKER", _ms(ring["start_ns"] + n["offset_ns"]),
                    alive(n["node_id"], ring["pid"]))
    for a in directory.actors.values():
        if a["state"] in ("ALIVE", "RESTARTING") and a["pid"]:
            add(a["node_id"], a["pid"], "WORKER", None, alive(a["node_id"], a["pid"]))
    return rows
