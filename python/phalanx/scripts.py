"""The `phalanx` command line: start and stop the processes of a cluster on
this machine, and look at a running cluster.

    phalanx start --head [--port P | --gcs-address HOST:PORT[,REPLICA:PORT]] [--num-cpus N] [--num-gpus N] [--resources JSON]
                         [--object-store-memory BYTES] [--node-ip IP] [--cpp-worker-libs A.so:B.so]
    phalanx start --address HOST:PORT [same node flags]    # one more node (raylet)
    phalanx status [--address HOST:PORT]
    phalanx stack [--address HOST:PORT]                   # every worker's Python stacks (this machine)
    phalanx stop
    phalanx job submit [--address HOST:PORT] [--working-dir DIR] -- python script.py   # docs/jobs.md
    phalanx job status|logs [--follow]|stop|delete ID;  phalanx job list
    phalanx up|down CLUSTER.yaml;  phalanx exec CLUSTER.yaml -- CMD   # machines over SSH: docs/cluster.md
    phalanx version

Processes started here outlive the command; `phalanx stop` ends them. What
this user started on this machine is recorded under /tmp/phalanx/cli-UID
(PHALANX_TMPDIR), readable by this user only. Every cluster has a token
(PHALANX_CLUSTER_TOKEN, or a random one kept in its session folder): this
user's phalanx commands on this machine find it there; other machines and
users need it exported.
"""
import argparse
import contextlib
import glob
import json
import os
import signal
import sys
import time

import phalanx
from phalanx import _core, dashboard
from phalanx._private import labels as _labels
from phalanx._private import memory
from phalanx._private.cluster_records import (cli_dir, current_head_address, head_file, record, records,
                                              use_cluster)
from phalanx._private.node import (NodeProcesses, cpp_worker_binary, new_session_dir, remove_exited_rings,
                                   stop_restarted_redis)
from phalanx._private.rpc_tables import alive_nodes, endpoints, primary
from phalanx.cluster import cli as cluster_cli
from phalanx.job import cli as job_cli
from phalanx.util.state import cli as state_cli
from phalanx.exceptions import PhalanxError, UnavailableError


def _split(address):
    """(host, port) of the GCS at `address` ("HOST:PORT", or a primary and its
    replicas "HOST:PORT,HOST:PORT...": the one that is the primary now)."""
    try:
        endpoints(address)
    except ValueError as e:
        raise SystemExit(f"phalanx: {e}")
    return primary(address)


def _resource_args(a):
    extra = []
    if a.num_gpus is not None:
        extra += ["--num-gpus", str(a.num_gpus)]
    if a.cpp_worker_libs:
        extra += ["--cpp-worker-command",
                  f"env PHALANX_CPP_WORKER=1 PHALANX_CPP_LIBS={a.cpp_worker_libs} {cpp_worker_binary()}"]
    if a.resources:
        try:
            json.loads(a.resources)
        except ValueError as e:
            raise SystemExit(f"phalanx: --resources is not JSON: {e}")
        extra += ["--resources", a.resources]
    if a.spill_dir:
        extra += ["--spill-dir", os.path.abspath(a.spill_dir)]
    if a.spill_max_bytes is not None:
        extra += ["--spill-max-bytes", str(a.spill_max_bytes)]
    if a.labels:
        extra += ["--labels", _labels.raylet_flag(_read_labels(a.labels))]
    if a.metrics_export_port is not None:
        extra += ["--metrics-export-port", str(a.metrics_export_port)]
    if a.node_name:
        extra += ["--node-name", a.node_name]
    return extra


def _read_labels(text):
    """`phalanx start --labels`: Ray's forms, a JSON object ('{"zone": "a"}') or "zone=a,gpu=h100"; checked."""
    text = text.strip()
    try:
        if text.startswith("{"):
            labels = json.loads(text)
        else:
            labels = dict(item.split("=", 1) for item in text.split(",") if item.strip())
            labels = {k.strip(): v.strip() for k, v in labels.items()}
        return _labels.check_node_labels(labels)
    except ValueError as e:
        raise SystemExit(f"phalanx: --labels: {e}") from None


def _cluster_address(a):
    """The cluster a command is about: --address, PHALANX_ADDRESS or the head
    started here; its token and TLS setting are taken on (use_cluster)."""
    address = a.address or os.environ.get("PHALANX_ADDRESS") or current_head_address()
    if not address:
        raise SystemExit("phalanx: no cluster known here; pass --address HOST:PORT or start one with "
                         "`phalanx start --head`")
    use_cluster(address)
    return address


@contextlib.contextmanager
def _driver_of(address):
    """This command as a driver of the cluster at `address` while the block runs."""
    phalanx.init(address=address)
    try:
        yield
    finally:
        phalanx.shutdown()


def cmd_start(a):
    if bool(a.head) == bool(a.address):
        raise SystemExit("phalanx: give either --head or --address HOST:PORT")
    if a.gcs_address and not a.head:
        raise SystemExit("phalanx: --gcs-address goes with --head (other nodes join with --address)")
    if a.gcs_address and a.port:
        raise SystemExit("phalanx: --port is for the redis-server phalanx starts; not with --gcs-address")
    num_cpus = a.num_cpus if a.num_cpus is not None else os.cpu_count()
    # Every cluster has a token: redis-server refuses whoever does not present
    # it, and every connection between phalanx processes proves it.
    if a.tls:
        os.environ["PHALANX_TLS"] = "1"
    if a.head and a.gcs_address:
        # An existing redis-server (managed, replicated): its password is the cluster's token.
        if not os.environ.get("PHALANX_CLUSTER_TOKEN"):
            raise SystemExit("phalanx: --gcs-address needs PHALANX_CLUSTER_TOKEN set to that redis-server's "
                             "password (its requirepass): every phalanx process presents it")
        try:
            host, port = _split(a.gcs_address)
            _core.redis_command(host, port, ["PING"], 5.0)  # fails clearly if nothing (or a stranger) answers there
        except UnavailableError as e:
            raise SystemExit(f"phalanx: cannot use the GCS at {a.gcs_address}: {e}")
        node = NodeProcesses(new_session_dir(), os.environ["PHALANX_CLUSTER_TOKEN"])
        node.redis_address = redis = a.gcs_address
    elif a.head:
        node = NodeProcesses(new_session_dir(), os.environ.get("PHALANX_CLUSTER_TOKEN"))  # (else a random one)
        redis = node.start_redis(port=a.port, host=a.node_ip, tie_to_parent=False)
    else:
        use_cluster(a.address)
        token = os.environ.get("PHALANX_CLUSTER_TOKEN")
        try:
            host, port = _split(a.address)
            nodes = alive_nodes(host, port)  # fails clearly if nothing answers there
        except UnavailableError as e:
            if token or "token" not in str(e):
                raise
            raise SystemExit("phalanx: joining a cluster needs its token: export PHALANX_CLUSTER_TOKEN=<the token "
                             "`phalanx start --head` printed> (this user's phalanx commands on the head's machine "
                             "find it themselves)")
        head_session = nodes[0]["session_dir"] if nodes else ""
        own = os.path.isdir(head_session) and os.stat(head_session).st_uid == os.getuid()
        node = NodeProcesses(head_session if own else new_session_dir(), token)
        node.redis_address = redis = a.address
    try:
        node.start_raylet(redis, num_cpus, a.object_store_memory, node_ip=a.node_ip, tie_to_parent=False,
                          extra_args=_resource_args(a))
    except BaseException:
        node.stop()
        raise
    if a.dashboard and a.head:
        node.procs.append(("dashboard", _start_dashboard(redis, a.dashboard_host, a.dashboard_port,
                                                         node.session_dir)))
    if a.head:
        node.procs.append(("job-agent", _start_job_agent(redis, node.session_dir)))
    record(node, "head" if a.head else "node")
    if a.head:
        with open(head_file(), "w") as f:
            f.write(redis)
        print(f"phalanx head started: GCS at {redis}\n"
              f"  add a node:        phalanx start --address {redis}\n"
              f"  connect a driver:  phalanx.init(address=\"{redis}\")  (or address=\"auto\")\n"
              f"  look at it:        phalanx status\n"
              + (f"  dashboard:         http://{a.dashboard_host}:{a.dashboard_port}/\n" if a.dashboard else "")
              + f"  logs:              {node.session_dir}/logs\n"
              + (f"  cluster token:     export PHALANX_CLUSTER_TOKEN={node.token}   (every other machine's nodes "
                 "and drivers need it)" if a.node_ip not in ("127.0.0.1", "localhost") else
                 f"  cluster token:     in {node.session_dir}/token (this user's phalanx commands here find it)"))
    else:
        print(f"phalanx node started and joined {redis}; logs in {node.session_dir}/logs")
    if a.wait_for_nodes:
        return _wait_for_nodes(redis, a.wait_for_nodes, a.wait_timeout)
    return 0


def _wait_for_nodes(address, want, timeout_s):
    """Waits until `want` nodes are alive, saying how many have joined as they come."""
    host, port = _split(address)
    start = time.monotonic()
    tty = sys.stdout.isatty()
    said = -1
    while True:
        try:
            alive = len(alive_nodes(host, port))
        except Exception as e:  # noqa: BLE001 - said, then tried again until the timeout
            alive, why = said if said >= 0 else 0, f" (the GCS did not answer: {e})"
        else:
            why = ""
        waited = time.monotonic() - start
        if alive != said or tty:
            line = f"waiting for nodes: {alive} of {want} alive after {waited:.0f} s{why}"
            print(("\r" + line) if tty else line, end="" if tty else "\n", flush=True)
            said = alive
        if alive >= want:
            print(("\n" if tty else "") + f"phalanx: {alive} nodes alive")
            return 0
        if waited > timeout_s:
            print("\n" if tty else "", end="")
            print(f"phalanx: only {alive} of {want} nodes joined within {timeout_s:g} s; "
                  "`phalanx status` shows which", file=sys.stderr)
            return 1
        time.sleep(0.5)


def _fmt_res(total, avail):
    parts = []
    for k in sorted(total):
        if k == "object_store_memory":
            continue
        used = total[k] - avail.get(k, total[k])
        parts.append(f"{used:g}/{total[k]:g} {k}")
    return ", ".join(parts)


def cmd_status(a):
    address = _cluster_address(a)
    if a.watch is None:
        return _print_status(address)
    # --watch: the same, every few seconds, until Ctrl-C (the screen is redrawn on a terminal).
    tty = sys.stdout.isatty()
    try:
        while True:
            if tty:
                sys.stdout.write("\033[H\033[2J")
            print(f"phalanx status, every {a.watch:g} s (Ctrl-C ends): {time.strftime('%H:%M:%S')}")
            _print_status(address)
            sys.stdout.flush()
            time.sleep(a.watch)
    except KeyboardInterrupt:
        return 0


def _print_status(address):
    host, port = _split(address)
    nodes = _core.gcs_nodes(host, port, 5.0)
    actors = _core.gcs_actors(host, port, 5.0)
    now_ms = time.time() * 1000
    print(f"cluster at {address}")
    if nodes:
        print(f"session folder: {nodes[0]['session_dir']}")
    print(f"\nnodes ({sum(1 for n in nodes if n['alive'])} alive, {len(nodes)} known):")
    for n in sorted(nodes, key=lambda n: n["start_time_ms"]):
        age = (now_ms - n["heartbeat_ms"]) / 1000
        state = "alive" if n["alive"] and age < 10 else ("dead" if not n["alive"] else f"silent {age:.0f}s")
        store = n["resources_total"].get("object_store_memory", 0)
        print(f"  {n['node_id'][:12]}  {state:8s} {n['address']}  pid {n['pid']}  "
              f"used {_fmt_res(n['resources_total'], n['resources_available'])}  "
              f"store {n['store_used'] / 2**20:.0f}/{store / 2**20:.0f} MiB  "
              f"tasks {n['tasks_running']} running {n['tasks_queued']} queued  workers {n['workers']}")
    live = [x for x in actors if x["state"] != "DEAD"]
    print(f"\nactors ({len(live)} live, {len(actors) - len(live)} dead):")
    for x in sorted(actors, key=lambda x: x["state"]):
        ns, _, short = x["name"].rpartition("/")  # (registered as "namespace/name")
        name = f" '{short}' in namespace {ns}" if ns else (f" '{short}'" if short else "")
        cause = f"  ({x['death_cause']})" if x["death_cause"] else ""
        print(f"  {x['actor_id'][:12]}  {x['state']:10s} {x['class_name']}{name}  pid {x['pid']}  "
              f"restarts {x['restarts']}{cause}")
    return 0


def _workers_of(raylet_pid):
    """Pids of the Python workers a raylet on this machine started (by /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            if int(fields[1]) != raylet_pid or fields[0] in ("Z", "X"):
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmdline = f.read()
            if b"phalanx._private.worker" in cmdline or cmdline.startswith(b"ray::"):  # (its title once it ran)
                out.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(out)


def cmd_stack(a):
    """Every thread's Python stack in every worker of the cluster's raylets on
    this machine, and in every driver connected to them: SIGUSR1 makes a
    worker's faulthandler write them to its log, a driver's to
    SESSION/logs/driver-PID.stack; this reads them back."""
    address = _cluster_address(a)
    host, port = _split(address)
    nodes = [n for n in _core.gcs_nodes(host, port, 5.0) if n["alive"]]
    marks = []  # (node, pid, log, offset)
    drivers = []  # (pid, stack file, offset)
    elsewhere = []
    sessions = set()
    for n in sorted(nodes, key=lambda n: n["start_time_ms"]):
        if not os.path.exists(n["socket_path"]) or not _alive(n["pid"]):
            elsewhere.append(n)
            continue
        session = os.path.dirname(n["socket_path"])
        if session not in sessions:
            sessions.add(session)
            drivers += _signal_drivers(session)
        for pid in _workers_of(n["pid"]):
            try:
                log = os.readlink(f"/proc/{pid}/fd/2")
                marks.append((n, pid, log, os.path.getsize(log)))
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                continue
    time.sleep(a.wait)
    print(f"cluster at {address}: {len(marks)} workers and {len(drivers)} drivers on this machine")
    for pid, path, offset in drivers:
        text = _read_from(path, offset)
        print(f"\n== driver pid {pid} ({path})\n{text.rstrip() or '(no stack: the driver did not answer)'}")
    for n, pid, log, offset in marks:
        text = _read_from(log, offset)
        text = text[text.find("Thread 0x") if "Thread 0x" in text else 0:] or "(no stack: the worker did not answer)\n"
        print(f"\n== node {n['node_id'][:12]} worker pid {pid} (log {log})\n{text.rstrip()}")
    for n in elsewhere:
        print(f"\n== node {n['node_id'][:12]} at {n['address']} runs on another machine: run `phalanx stack` there")
    return 0


def _read_from(path, offset):
    """What `path` holds past `offset` (what a process wrote there since), or why it cannot be read."""
    try:
        with open(path, errors="replace") as f:
            f.seek(offset)
            return f.read()
    except OSError as e:
        return f"(cannot read {path}: {e})"


def _signal_drivers(session):
    """SIGUSR1 to each live driver of `session` that offers its stacks (a
    SESSION/logs/driver-PID.stack it holds open): [(pid, file, offset)]."""
    out = []
    folder = os.path.join(session, "logs")
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        if not (name.startswith("driver-") and name.endswith(".stack")):
            continue
        path = os.path.join(folder, name)
        try:
            pid = int(name[len("driver-"):-len(".stack")])
            # (the pid may be reused: only the process holding the file open is signalled)
            fds = os.listdir(f"/proc/{pid}/fd")
            if not any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in fds):
                continue
            out.append((pid, path, os.path.getsize(path)))
            os.kill(pid, signal.SIGUSR1)
        except (OSError, ValueError):
            continue
    return sorted(out)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def cmd_timeline(a):
    with _driver_of(_cluster_address(a)):
        phalanx.timeline(a.output, since_s=a.since)
    print(f"phalanx: wrote the timeline of the last {a.since:g} s to {a.output} "
          "(open it in chrome://tracing or https://ui.perfetto.dev)")
    return 0


def cmd_dashboard(a):
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise SystemExit("phalanx: the dashboard needs aiohttp: pip install 'phalanx[dashboard]'")
    address = _cluster_address(a)

    def ready(port):
        print(f"phalanx dashboard of {address} at http://{a.host}:{port}/"
              + ("" if dashboard._loopback(a.host) else "?token=$PHALANX_CLUSTER_TOKEN (open it once)"),
              flush=True)
    with _driver_of(address):
        try:
            dashboard.serve(a.host, a.port, ready=ready)
        except KeyboardInterrupt:
            pass
        except (OSError, ValueError) as e:
            raise SystemExit(f"phalanx: cannot serve the dashboard on {a.host}:{a.port}: {e}")
    return 0


def _start_dashboard(redis, host, port, session_dir):
    """`phalanx start --head --dashboard`: the dashboard as a process of its own, stopped by `phalanx stop`."""
    from phalanx._private.node import start_dashboard
    return start_dashboard(redis, host, port, session_dir, tie_to_parent=False)


def _start_job_agent(redis, session_dir):
    """The head's job agent (phalanx/job/agent.py): runs submitted jobs; `phalanx stop` stops it and them."""
    import subprocess
    from phalanx.job.table import JobTable
    log_path = os.path.join(session_dir, "logs", "job-agent.log")
    with open(log_path, "ab") as log:
        p = subprocess.Popen([sys.executable, "-m", "phalanx.job.agent", "--address", redis, "--session-dir",
                              session_dir], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    table, deadline = JobTable(redis), time.monotonic() + 15.0
    while table.agent() is None:  # (up when `start` returns: a job submitted right after finds it)
        if p.poll() is not None or time.monotonic() > deadline:
            print(f"phalanx: warning: the job agent did not come up (jobs cannot run); see {log_path}",
                  file=sys.stderr)
            break
        time.sleep(0.05)
    return p


def cmd_memory(a):
    with _driver_of(_cluster_address(a)):
        print(memory.format_summary(memory.summary(max(a.limit, 1) * 4), limit=a.limit))
    return 0


def cmd_stop(a):
    paths = sorted(glob.glob(os.path.join(cli_dir(), "started-*.json")))
    if not paths:
        print("phalanx: nothing started here to stop")
        return 0
    pids, sessions = [], []
    for path in paths:
        with open(path) as f:
            rec = json.load(f)
        pids += [(p["name"], p["pid"]) for p in rec["procs"]]
        if rec.get("role") == "head":
            sessions.append(rec.get("session_dir", ""))
    # Raylets first (they stop their workers; the head one would start a
    # redis-server that went first again), redis-server last.
    deadline = time.monotonic() + a.grace
    for group in ([p for p in pids if p[0] != "redis-server"], [p for p in pids if p[0] == "redis-server"]):
        for name, pid in group:
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
        for name, pid in group:
            while _alive(pid) and time.monotonic() < deadline:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.02)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    for session in sessions:  # one the head raylet started again after the first died
        stop_restarted_redis(session, [pid for name, pid in pids if name == "redis-server"])
    for session in {rec.get("session_dir", "") for _, rec in records()}:  # the timeline's rings (memory)
        if session:
            remove_exited_rings(session)
    for path in paths:
        os.unlink(path)
    if os.path.exists(head_file()):
        os.unlink(head_file())
    print(f"phalanx: stopped {len(pids)} processes")
    return 0


def parser():
    """The `phalanx` command's argument parser (its subcommands are what `phalanx --help` lists)."""
    ap = argparse.ArgumentParser(prog="phalanx", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a head node or join a node to a cluster")
    s.add_argument("--head", action="store_true")
    s.add_argument("--address", help="HOST:PORT of the cluster's GCS, to join it")
    s.add_argument("--port", type=int, help="GCS port for --head (default: a free one)")
    s.add_argument("--gcs-address", help="with --head: use this existing redis-server (HOST:PORT, or a primary and "
                   "its replicas HOST:PORT,HOST:PORT: whichever is the primary; its password is the cluster token, "
                   "PHALANX_CLUSTER_TOKEN) instead of starting one; docs/fault-tolerance.md")
    s.add_argument("--num-cpus", type=float)
    s.add_argument("--num-gpus", type=int)
    s.add_argument("--resources", help='custom resources as JSON, e.g. \'{"sim": 8}\'')
    s.add_argument("--object-store-memory", type=int)
    s.add_argument("--spill-dir", help="where objects go when the store is full (default: the session folder); "
                   "docs/fault-tolerance.md")
    s.add_argument("--spill-max-bytes", type=int, help="at most this much on disk (default: until the disk is "
                   "95%% full)")
    s.add_argument("--node-ip", default="127.0.0.1")
    s.add_argument("--labels", help='the node\'s labels (what label_selector= matches): "zone=a,gpu=h100" or JSON')
    s.add_argument("--node-name", help="the node's name (phalanx.nodes()' NodeName; default: its address)")
    s.add_argument("--metrics-export-port", type=int, help="the node's Prometheus endpoint (default: a free port, "
                   "in phalanx.nodes()'s MetricsExportPort; docs/observability.md)")
    s.add_argument("--tls", action="store_true",
                   help="TLS for every connection between machines (GCS, raylets, actor calls); give it on "
                        "every node (or set PHALANX_TLS=1); docs/security.md")
    s.add_argument("--dashboard", action="store_true", help="with --head: serve the dashboard too "
                   "(docs/observability.md; `phalanx stop` stops it)")
    s.add_argument("--dashboard-host", default="127.0.0.1", help="where the dashboard listens (default: loopback; "
                   "any other address asks for the cluster token)")
    s.add_argument("--dashboard-port", type=int, default=8265)
    s.add_argument("--wait-for-nodes", type=int, metavar="N",
                   help="then wait until N nodes are alive, showing how many have joined")
    s.add_argument("--wait-timeout", type=float, default=300.0, help="for --wait-for-nodes (default: 300 s)")
    s.add_argument("--cpp-worker-libs", help="colon-separated shared libraries whose PHALANX_REMOTE functions this "
                   "node's C++ workers run (without it, the node runs no C++ tasks)")
    st = sub.add_parser("status", help="nodes, resources, actors and queued work")
    st.add_argument("--address")
    st.add_argument("--watch", type=float, nargs="?", const=2.0, metavar="SECONDS",
                    help="show it again every SECONDS (default 2) until Ctrl-C")
    sk = sub.add_parser("stack", help="the Python stacks of every worker and driver of the cluster on this machine")
    sk.add_argument("--address")
    sk.add_argument("--wait", type=float, default=0.5, help="seconds to give processes to write their stacks")
    sub.add_parser("debug", help="Ray's remote debugger: phalanx has none (it says why)")
    tl = sub.add_parser("timeline", help="write the cluster's timeline as a Chrome trace (docs/observability.md)")
    tl.add_argument("--address")
    tl.add_argument("-o", "--output", default="timeline.json", help="the JSON file to write (default: timeline.json)")
    tl.add_argument("--since", type=float, default=600.0, help="seconds back from now (default: 600)")
    db = sub.add_parser("dashboard", help="serve the cluster's dashboard (a web page; docs/observability.md)")
    db.add_argument("--address")
    db.add_argument("--host", default="127.0.0.1", help="default: loopback; any other address asks for the "
                    "cluster token")
    db.add_argument("--port", type=int, default=8265)
    mm = sub.add_parser("memory", help="the cluster's objects by size, per node, with what keeps each one")
    mm.add_argument("--address")
    mm.add_argument("--limit", type=int, default=20, help="objects shown per node (default: 20)")
    sp = sub.add_parser("stop", help="stop what `phalanx start` started on this machine")
    sp.add_argument("--grace", type=float, default=10.0)
    job_cli.add_parser(sub)
    state_cli.add_parsers(sub)
    cluster_cli.add_parsers(sub)
    sub.add_parser("version")
    for verb in ("enable", "disable"):  # Ray's commands; phalanx sends nothing anywhere, so there is nothing to turn
        sub.add_parser(f"{verb}-usage-stats", help="phalanx collects no usage statistics (Ray's command, a no-op)")
    sub.add_parser("microbenchmark", add_help=False,
                   help="the microbenchmark with Ray's metric names (python -m phalanx.microbenchmark --help)")
    return ap


def main(argv=None):
    ap = parser()
    a, rest = ap.parse_known_args(argv)
    if a.cmd == "microbenchmark":
        from phalanx import microbenchmark
        return microbenchmark.main(rest)
    if rest:
        ap.error("unrecognized arguments: " + " ".join(rest))
    if a.cmd == "version":
        print(phalanx.__version__)
        return 0
    if a.cmd == "debug":
        from phalanx.util.rpdb import WHY
        print(f"phalanx debug: {WHY}", file=sys.stderr)
        return 2
    if a.cmd.endswith("-usage-stats"):
        print("phalanx collects no usage statistics: nothing is sent anywhere, so there is nothing to "
              f"{a.cmd.split('-')[0]}")
        return 0
    try:
        return {"start": cmd_start, "status": cmd_status, "stop": cmd_stop, "stack": cmd_stack,
                "timeline": cmd_timeline, "memory": cmd_memory, "dashboard": cmd_dashboard, "job": job_cli.run,
                "up": cluster_cli.run, "down": cluster_cli.run, "exec": cluster_cli.run,
                **dict.fromkeys(state_cli.COMMANDS, state_cli.run)}[a.cmd](a)
    except Exception as e:  # a clear one-line error, not a traceback, for operators
        if isinstance(e, PhalanxError):
            print(f"phalanx: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
