"""Helpers of the chaos suite (tests/chaos, docs/fault-tolerance.md): the
Python suite's (tests/python/conftest.py, loaded under its own name: both
suites run in one pytest session), and helpers that kill and start real
processes. Every test ends with nothing it started still running."""
import importlib.util
import os
import signal
import subprocess
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("_python_conftest", os.path.join(_here, "..", "python", "conftest.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)
sys.modules["_python_conftest"] = _base

loopback_nodes = _base.loopback_nodes
wait_until = _base.wait_until


def live(pid):
    """True while `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def children(pid):
    """Processes whose parent is `pid` (a raylet's workers), from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rpartition(")")[2].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def raylet_logs(session_dir):
    """The logs of every raylet of a session, one after the other."""
    out = ""
    for name in sorted(os.listdir(os.path.join(session_dir, "logs"))):
        if name.startswith("raylet-"):
            with open(os.path.join(session_dir, "logs", name), errors="replace") as f:
                out += f.read()
    return out


def kill9(pid):
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not live(pid), timeout=10, what=f"pid {pid} to die")


class RedisServer:
    """A redis-server of the test's own (an operator's external GCS): the
    cluster token as its password, AOF in `folder`, on `port`."""

    def __init__(self, folder, token, port=None, replica_of=None):
        from phalanx._private.node import free_port, redis_binary
        self.folder, self.token = folder, token
        self.port = port or free_port()
        os.makedirs(folder, exist_ok=True)
        conf = os.path.join(folder, "redis.conf")
        with open(conf, "w") as f:
            f.write(f"requirepass {token}\nmasterauth {token}\n")
        os.chmod(conf, 0o600)
        self.cmd = [redis_binary(), conf, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "yes", "--appendfsync", "everysec", "--dir", folder,
                    "--logfile", os.path.join(folder, "redis.log")]
        if replica_of:
            self.cmd += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.proc = None
        self.start()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        from phalanx import _core
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        old = os.environ.get("PHALANX_CLUSTER_TOKEN")
        os.environ["PHALANX_CLUSTER_TOKEN"] = self.token

        def up():
            try:
                return _core.redis_command("127.0.0.1", self.port, ["PING"], 0.5) in ("PONG", b"PONG")
            except Exception:
                return False
        try:
            wait_until(up, timeout=20, what=f"redis-server on {self.port}")
        finally:
            if old is None:
                os.environ.pop("PHALANX_CLUSTER_TOKEN", None)
            else:
                os.environ["PHALANX_CLUSTER_TOKEN"] = old

    def command(self, *args):
        from phalanx import _core
        old = os.environ.get("PHALANX_CLUSTER_TOKEN")
        os.environ["PHALANX_CLUSTER_TOKEN"] = self.token
        try:
            return _core.redis_command("127.0.0.1", self.port, list(args), 5.0)
        finally:
            if old is None:
                os.environ.pop("PHALANX_CLUSTER_TOKEN", None)
            else:
                os.environ["PHALANX_CLUSTER_TOKEN"] = old

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
