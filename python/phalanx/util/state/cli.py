"""The state API's commands, as Ray users type them (`ray list|get|summary|logs` is `phalanx ...`):

    phalanx list actors|tasks|objects|nodes|jobs|placement-groups|workers|runtime-envs
                 [--filter KEY=VALUE | KEY!=VALUE ...] [--limit 100] [--detail] [--format default|table|yaml|json]
    phalanx get actors|tasks|objects|nodes|workers|placement-groups ID
    phalanx summary tasks|actors|objects
    phalanx logs [cluster] [GLOB] [--node-id ID | --node-ip IP] [--tail 1000] [--follow]
    phalanx logs actor --id ID | --pid PID;  logs task --id ID;  logs worker --pid PID;  logs job --id ID

Each takes --address HOST:PORT (default: PHALANX_ADDRESS or the head started here) and --timeout S.
A list prints a table by default (YAML with --detail); get prints YAML. An error is one line on
stderr and exit status 1 (2 for a command given wrong)."""
import argparse
import sys
import warnings

import yaml

from phalanx.util.state import api, logs, output
from phalanx.util.state.common import DEFAULT_LIMIT, DEFAULT_LOG_LIMIT, DEFAULT_RPC_TIMEOUT, StateResource, \
    resource_to_schema
from phalanx.util.state.exception import RayStateApiException

COMMANDS = ("list", "get", "summary", "logs")
_LISTED = [r.value.replace("_", "-") for r in StateResource]
_GOT = [r for r in _LISTED if r not in ("jobs", "runtime-envs")]


def parse_filter(text):
    """(key, predicate, value) of "key=value" or "key!=value" (Ray's _parse_filter: the first "=" or "!="
    splits it)."""
    for i, ch in enumerate(text):
        if ch == "=" or (ch == "!" and text[i + 1:i + 2] == "="):
            cut = 1 if ch == "=" else 2
            key, predicate, value = text[:i], text[i:i + cut], text[i + cut:]
            if key and value:
                return key, predicate, value
            break
    raise ValueError(f"The format of a given filter {text} is invalid: give key=value or key!=value")


def _common(p):
    p.add_argument("--address", help="the GCS (HOST:PORT); default: PHALANX_ADDRESS or the head started here")
    p.add_argument("--timeout", type=float, default=DEFAULT_RPC_TIMEOUT, help="seconds (default: 30)")


class _LogsSubcommands(argparse._SubParsersAction):
    """`logs`' subcommands, where `phalanx logs GLOB ...` is `phalanx logs cluster GLOB ...` (Ray's alias):
    a first word that names no subcommand is a glob of `logs cluster` (accept_globs() lets argparse pass
    it here)."""

    class _AnyWord(dict):
        def __contains__(self, word):
            return True

    def accept_globs(self):
        self.choices = self._AnyWord(self._name_parser_map)

    def __call__(self, parser, namespace, values, option_string=None):
        if values and values[0] not in self._name_parser_map:
            values = ["cluster"] + list(values)
        super().__call__(parser, namespace, values, option_string)


def _log_options(p, node=True):
    _common(p)
    if node:
        p.add_argument("--node-id", "-id", help="the node (default: the head)")
        p.add_argument("--node-ip", "-ip", help="the node, by address")
    p.add_argument("--follow", "-f", action="store_true", help="then print what is written, until Ctrl-C")
    p.add_argument("--tail", type=int, default=DEFAULT_LOG_LIMIT, help="the last N lines (-1: all; default 1000)")
    p.add_argument("--err", action="store_true", help="accepted: a worker's stdout and stderr are one log")


def add_parsers(sub):
    """Adds list, get, summary and logs to the `phalanx` command's subparsers `sub`."""
    lp = sub.add_parser("list", help="list the cluster's actors, tasks, objects, nodes, jobs, ... (Ray's `ray list`)")
    lsub = lp.add_subparsers(dest="state_resource", required=True, metavar="RESOURCE")
    for r in _LISTED:
        p = lsub.add_parser(r, help=f"the cluster's {r}")
        _common(p)
        p.add_argument("--format", choices=output.FORMATS, default="default")
        p.add_argument("-f", "--filter", action="append", default=[], help="KEY=VALUE or KEY!=VALUE (ANDed)")
        p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="at most this many (default 100)")
        p.add_argument("--detail", action="store_true", help="every column (printed as YAML unless --format)")
    gp = sub.add_parser("get", help="one actor, task, object, node, worker or placement group by id (`ray get`)")
    gsub = gp.add_subparsers(dest="state_resource", required=True, metavar="RESOURCE")
    for r in _GOT:
        p = gsub.add_parser(r, help=f"one of the cluster's {r}")
        p.add_argument("id", nargs="?")
        _common(p)
    sp = sub.add_parser("summary", help="tasks by function, actors by class, objects by call site (`ray summary`)")
    ssub = sp.add_subparsers(dest="state_resource", required=True, metavar="RESOURCE")
    for r in ("tasks", "actors", "objects"):
        _common(ssub.add_parser(r, help=f"the cluster's {r}, counted"))
    lg = sub.add_parser("logs", help="the log files of a node, an actor, a task, a worker or a job (`ray logs`)")
    lg.set_defaults(glob_filter="*", address=None, timeout=DEFAULT_RPC_TIMEOUT, node_id=None, node_ip=None,
                    follow=False, tail=DEFAULT_LOG_LIMIT, err=False)  # (`phalanx logs` alone: `logs cluster`)
    lgsub = lg.add_subparsers(dest="logs_cmd", action=_LogsSubcommands, metavar="{cluster,actor,task,worker,job}")
    c = lgsub.add_parser("cluster", help="list a node's log files matching GLOB, or print the one that matches")
    c.add_argument("glob_filter", nargs="?", default="*")
    _log_options(c)
    a = lgsub.add_parser("actor", help="an actor's worker's log")
    a.add_argument("--id", "-a", help="the actor id")
    a.add_argument("--pid", "-pid", type=int, help="the actor's process (with --node-id or --node-ip)")
    _log_options(a)
    t = lgsub.add_parser("task", help="the log of the worker that ran a task")
    t.add_argument("--id", "-t", required=True, help="the task id")
    t.add_argument("--attempt-number", type=int, default=0)
    _log_options(t, node=False)
    w = lgsub.add_parser("worker", help="a worker process's log")
    w.add_argument("--pid", "-pid", type=int, required=True)
    _log_options(w)
    j = lgsub.add_parser("job", help="a submitted job's output")
    j.add_argument("--id", required=True, help="the submission id")
    _log_options(j, node=False)
    lgsub.accept_globs()


def _list(a):
    resource = StateResource(a.state_resource.replace("-", "_"))
    filters = [parse_filter(f) for f in a.filter]
    explain = a.format in ("default", "table")
    states = api.StateApiClient(a.address).list(
        resource, api.ListApiOptions(limit=a.limit, timeout=a.timeout, filters=filters, detail=a.detail),
        raise_on_missing_output=False, _explain=explain)
    fmt = "yaml" if a.detail and a.format == "default" else a.format
    print(output.list_output(states, resource_to_schema(resource), fmt, a.detail))
    return 0


def _get(a):
    if not a.id:
        print(f"phalanx get: Missing argument 'ID'. Do you mean 'phalanx list {a.state_resource}'?", file=sys.stderr)
        return 2
    resource = StateResource(a.state_resource.replace("-", "_"))
    found = api.StateApiClient(a.address).get(resource, a.id, api.GetApiOptions(timeout=a.timeout), _explain=True)
    print(output.get_output(found, a.id, resource_to_schema(resource)))
    return 0


def _summary(a):
    fn = {"tasks": api.summarize_tasks, "actors": api.summarize_actors, "objects": api.summarize_objects}
    result = fn[a.state_resource](address=a.address, timeout=a.timeout, raise_on_missing_output=False, _explain=True)
    print(output.summary_output(result, a.state_resource))
    return 0


def _print_log(a, **which):
    if a.tail > 0:
        print(f"--- Log has been truncated to last {a.tail} lines. Use `--tail` flag to toggle. Set to -1 for "
              "getting the entire file. ---\n")
    try:
        for chunk in logs.get_log(address=a.address, follow=a.follow, tail=a.tail, timeout=a.timeout,
                                  errors="replace", **which):
            print(chunk, end="", flush=True)
    except KeyboardInterrupt:
        pass
    return 0


def _logs(a):
    cmd = a.logs_cmd or "cluster"
    node = {"node_id": getattr(a, "node_id", None), "node_ip": getattr(a, "node_ip", None)}  # (task, job: none)
    if cmd == "cluster":
        glob = a.glob_filter
        if not (node["node_id"] or node["node_ip"]):
            node["node_id"] = min(api.list_nodes(address=a.address, filters=[("state", "=", "ALIVE")], detail=True),
                                  key=lambda n: n["start_time_ms"])["node_id"]
        found = logs.list_logs(address=a.address, glob_filter=glob, timeout=a.timeout, **node)
        files = [f for names in found.values() for f in names]
        if len(files) != 1:
            print(f"Node ID: {node['node_id']}" if node["node_id"] else f"Node IP: {node['node_ip']}")
            print(yaml.dump(found, indent=4, explicit_start=True, sort_keys=False, explicit_end=True))
            return 0
        return _print_log(a, filename=files[0], **node)
    if cmd == "actor":
        if a.id is None and a.pid is None:
            print("phalanx logs actor: give --id or --pid", file=sys.stderr)
            return 2
        return _print_log(a, actor_id=a.id, pid=a.pid, **node)
    if cmd == "task":
        return _print_log(a, task_id=a.id, attempt_number=a.attempt_number)
    if cmd == "worker":
        return _print_log(a, pid=a.pid, **node)
    return _print_log(a, submission_id=a.id)


def run(a):
    """Runs `phalanx list|get|summary|logs` as parsed; the exit status."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            return {"list": _list, "get": _get, "summary": _summary, "logs": _logs}[a.cmd](a)
    except (RayStateApiException, ValueError, TypeError) as e:
        print(f"phalanx {a.cmd}: {e}", file=sys.stderr)
        return 1
