"""Ray's log API (list_logs, get_log) over phalanx's log files: each node writes its logs in its
session folder's logs/ (raylet-*.log, worker-TOKEN.log with the worker's stdout and stderr both,
redis.log, job-agent.log, dashboard.log). These are read where they are: the nodes of this machine.
A node on another machine has no service that serves its files: asking for its logs is an error
that says to run `phalanx logs` there. A submitted job's output is read from the GCS (any machine).

A worker's log is found by its process: an actor's (the actor table gives its pid), a task's (its
worker, list_tasks), a pid's; the log of a process that exited cannot be found (the raylet names
worker logs by a token it does not record), nor the part of a log one task wrote."""
import fnmatch
import os
import time

from phalanx.util.state import api
from phalanx.util.state.common import DEFAULT_RPC_TIMEOUT
from phalanx.util.state.directory import Directory, pid_alive
from phalanx.util.state.exception import RayStateApiException
from phalanx.util.state.gcs_tables import GcsTables
from phalanx.util.state.sources import resolve_address

FOLLOW_INTERVAL_S = 0.5
_GROUPS = (("raylet", "raylet"), ("worker", "worker"), ("redis", "gcs_server"), ("job-agent", "agent"),
           ("dashboard", "dashboard"), ("driver", "driver"))


def _group(filename):
    for prefix, group in _GROUPS:
        if filename.startswith(prefix):
            return group
    return "internal"


def _node(directory, node_id, node_ip):
    """The node record named by id or address (the head: the oldest live node, when neither is given)."""
    if node_id and node_ip:
        raise ValueError(f"Both node_id and node_ip are given. Only one of them can be provided. Given node id: "
                         f"{node_id}, given node ip: {node_ip}")
    nodes = sorted(directory.nodes.values(), key=lambda n: (not n["alive"], n["start_time_ms"]))
    for n in nodes:
        if (node_id and n["node_id"] == node_id.lower()) or (node_ip and n["address"] == node_ip) or \
                not (node_id or node_ip):
            return n
    raise RayStateApiException(f"no node {node_id or node_ip} in the cluster; its nodes: "
                               f"{[(n['node_id'], n['address']) for n in nodes]}")


def _logs_dir(directory, node):
    if not directory.is_local(node["node_id"]):
        raise RayStateApiException(f"node {node['node_id']} ({node['address']}) is not a live node of this machine: "
                                   f"its logs are in {node['session_dir']}/logs there; run `phalanx logs` on it")
    return os.path.join(node["session_dir"], "logs")


def list_logs(address=None, node_id=None, node_ip=None, glob_filter=None, timeout=DEFAULT_RPC_TIMEOUT,
              headers=None, verify=True):
    """{group ("raylet", "worker", "gcs_server", "agent", "dashboard", "driver", "internal"): [file names]}
    of the logs of the node given by id or address matching `glob_filter`."""
    if node_id is None and node_ip is None:
        raise ValueError("At least one of node ip and node id is required")
    gcs = GcsTables(resolve_address(address), timeout)
    directory = Directory(gcs.nodes(), [])
    folder = _logs_dir(directory, _node(directory, node_id, node_ip))
    out = {}
    for name in sorted(os.listdir(folder)):
        if fnmatch.fnmatch(name, glob_filter or "*"):
            out.setdefault(_group(name), []).append(name)
    return out


def _process_log(pid):
    """The log file process `pid` (of this machine) writes its output to."""
    try:
        return os.readlink(f"/proc/{int(pid)}/fd/1")
    except OSError as e:
        raise RayStateApiException(f"the log of process {pid} cannot be found: it is not running on this machine "
                                   f"({e}); an exited worker's log is not known by its pid") from e


def _tail(data, tail):
    if tail is None or tail < 0:
        return data
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-tail:]) if tail else b""


def _follow_file(path, offset, interval):
    with open(path, "rb") as f:
        f.seek(offset)
        while True:
            chunk = f.read()
            if chunk:
                yield chunk
            else:
                time.sleep(interval)


def _follow_job(gcs, submission_id, offset, interval):
    while True:
        data = gcs.job_log(submission_id)
        if len(data) > offset:
            yield data[offset:]
            offset = len(data)
        else:
            time.sleep(interval)


def _worker_process(address, directory, actor_id, task_id, attempt_number, timeout):
    """(node id, pid) of the worker of an actor or a task."""
    if actor_id:
        actor = directory.actors.get(actor_id.lower())
        if actor is None or not actor["pid"]:
            raise RayStateApiException(f"actor {actor_id} has no worker process in the cluster's actor table")
        return actor["node_id"], actor["pid"]
    found = api.get_task(task_id, address=address, timeout=timeout)
    runs = [found] if found is not None and not isinstance(found, list) else (found or [])
    runs = [t for t in runs if t["attempt_number"] == attempt_number and t["worker_pid"]]
    if not runs:
        raise RayStateApiException(f"task {task_id} attempt {attempt_number} has no known worker (it is not in "
                                   "list_tasks, or has not run)")
    return runs[0]["node_id"], runs[0]["worker_pid"]


def get_log(address=None, node_id=None, node_ip=None, filename=None, actor_id=None, task_id=None, pid=None,
            follow=False, tail=-1, timeout=DEFAULT_RPC_TIMEOUT, suffix="out", encoding="utf-8", errors="strict",
            submission_id=None, attempt_number=0, _interval=None, filter_ansi_code=False, headers=None,
            verify=True):
    """The log (its last `tail` lines; -1: all) of a file of a node, of an actor's, a task's or a
    process's worker, or of a submitted job, as chunks of text (bytes with encoding=None); with
    `follow`, then what is written to it as it comes, until the caller stops reading. `suffix` "err"
    gives the same file ("out"): a worker writes its stdout and stderr to one log."""
    if suffix not in ("out", "err"):
        raise ValueError(f"Invalid suffix: {suffix}. Must be one of 'out' or 'err'.")
    if not (actor_id or task_id or pid or filename or submission_id):
        raise ValueError("None of actor_id, task_id, pid, submission_id or filename is provided. At least one of "
                         "them is required to fetch logs.")
    address = resolve_address(address)
    gcs = GcsTables(address, timeout)
    interval = _interval or FOLLOW_INTERVAL_S
    if submission_id:
        data = gcs.job_log(submission_id)
        chunks = [_tail(data, tail)]
        source = _follow_job(gcs, submission_id, len(data), interval) if follow else iter(())
    else:
        directory = Directory(gcs.nodes(), [], gcs.actors() if actor_id else ())
        if filename:
            folder = _logs_dir(directory, _node(directory, node_id, node_ip))
            path = os.path.normpath(os.path.join(folder, filename))
            if os.path.dirname(path) != os.path.normpath(folder):
                raise ValueError(f"filename {filename!r} names no file of the logs folder {folder}")
        else:
            if pid:
                node = _node(directory, node_id, node_ip)
                where = (node["node_id"], int(pid))
            else:
                where = _worker_process(address, directory, actor_id, task_id, attempt_number, timeout)
            _logs_dir(directory, directory.nodes.get(where[0]) or _node(directory, where[0], None))
            if not pid_alive(where[1]):
                raise RayStateApiException(f"process {where[1]} on node {where[0]} has exited: its log is not "
                                           "known by its pid")
            path = _process_log(where[1])
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise RayStateApiException(f"cannot read the log {path}: {e}") from e
        chunks = [_tail(data, tail)]
        source = _follow_file(path, len(data), interval) if follow else iter(())
    for chunk in [c for c in chunks if c]:
        yield chunk if encoding is None else chunk.decode(encoding, errors)
    for chunk in source:
        yield chunk if encoding is None else chunk.decode(encoding, errors)

