"""Starting and stopping the processes of a node: redis-server (the GCS, on
the head node only) and phalanx-raylet. Used by phalanx.init() for the
embedded local cluster and by the `phalanx` CLI."""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from phalanx import _core
from phalanx.exceptions import UnavailableError

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL when the process that started it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def free_port(host="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def raylet_binary():
    path = os.environ.get("PHALANX_RAYLET_BIN") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "phalanx-raylet")
    if not os.path.exists(path):
        raise UnavailableError(f"the raylet binary is missing at {path}: reinstall phalanx "
                               "(scripts/setup.sh or `pip install .`)")
    return path


def redis_binary():
    path = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(path):
        raise UnavailableError("redis-server is not installed; run scripts/setup.sh "
                               "(it installs Debian's redis-server package)")
    return path


def new_session_dir(root=None):
    root = root or os.environ.get("PHALANX_TMPDIR", "/tmp/phalanx")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(root, exist_ok=True)
    for n in range(1000):  # unique even for several clusters in one second
        path = os.path.join(root, f"session_{stamp}_{os.getpid()}" + (f"_{n}" if n else ""))
        try:
            os.makedirs(path)
            break
        except FileExistsError:
            continue
    os.makedirs(os.path.join(path, "logs"), exist_ok=True)
    return path


def _tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


class NodeProcesses:
    """The processes this driver (or CLI) started, stopped in reverse order."""

    def __init__(self, session_dir):
        self.session_dir = session_dir
        self.procs = []  # (name, Popen)
        self.redis_address = None
        self.raylet_socket = None

    def start_redis(self, port=None, host="127.0.0.1", tie_to_parent=True, password=None):
        for attempt in range(5):
            p = port or free_port(host)
            log = os.path.join(self.session_dir, "logs", "redis.log")
            cmd = [redis_binary(), "--port", str(p), "--bind", host, "--save", "", "--appendonly", "no",
                   "--daemonize", "no", "--logfile", log, "--dir", self.session_dir]
            if password:
                cmd += ["--requirepass", password]
                os.environ["PHALANX_CLUSTER_TOKEN"] = password  # our own PING below presents it
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT, cwd=self.session_dir,
                                    preexec_fn=_die_with_parent if tie_to_parent else None,
                                    start_new_session=not tie_to_parent)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                try:
                    _core.redis_command(host, p, ["PING"], 0.5)
                    self.procs.append(("redis-server", proc))
                    self.redis_address = f"{host}:{p}"
                    return self.redis_address
                except Exception:
                    time.sleep(0.02)
            proc.kill()
            proc.wait()
            if port:  # a fixed port that failed will not work on retry
                break
        raise UnavailableError(f"redis-server did not start; its log {log} ends with:\n{_tail(log)}")

    def start_raylet(self, redis_address, num_cpus, object_store_memory=None, node_ip="127.0.0.1",
                     tie_to_parent=True, extra_args=(), token=None, netns=None):
        """`netns`: run it in that network namespace (`ip netns exec`), as another host."""
        tag = os.urandom(4).hex()  # several raylets may share a session folder
        sock = os.path.join(self.session_dir, f"raylet-{tag}.sock")
        if len(sock) > 100:  # Unix socket paths are limited to 107 bytes
            short = os.path.join("/tmp", f"phalanx-{os.getuid()}")
            os.makedirs(short, exist_ok=True)
            sock = os.path.join(short, f"raylet-{tag}.sock")
        log = os.path.join(self.session_dir, "logs", f"raylet-{tag}.log")
        worker_cmd = f"{sys.executable} -u -m phalanx._private.worker"
        cmd = [raylet_binary(), "--socket", sock, "--session-dir", self.session_dir,
               "--redis-address", redis_address, "--worker-command", worker_cmd,
               "--num-cpus", str(num_cpus), "--node-ip", node_ip]
        if object_store_memory:
            cmd += ["--object-store-memory", str(int(object_store_memory))]
        cmd += list(extra_args)
        if netns:
            cmd = ["ip", "netns", "exec", netns] + cmd  # it execs: the pid stays the raylet's
        env = dict(os.environ)
        # Workers import what the driver can: its script folder and working directory.
        paths = [p for p in (os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else "",
                             os.getcwd()) if p]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        if token:
            env["PHALANX_CLUSTER_TOKEN"] = token
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, preexec_fn=_die_with_parent if tie_to_parent else None,
                                    start_new_session=not tie_to_parent)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UnavailableError(f"phalanx-raylet exited with code {proc.returncode} at start; "
                                       f"its log {log} ends with:\n{_tail(log)}")
            if os.path.exists(sock):
                self.procs.append(("raylet", proc))
                self.raylet_socket = sock
                return sock
            time.sleep(0.01)
        proc.kill()
        raise UnavailableError(f"phalanx-raylet did not open {sock} within 20 s; log {log}:\n{_tail(log)}")

    def stop(self, timeout=5.0):
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for name, proc in reversed(self.procs):
            try:
                proc.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []
