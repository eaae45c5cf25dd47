"""Starting and stopping the processes of a node: redis-server (the GCS, on
the head node only) and phalanx-raylet. Used by phalanx.init() for the
embedded local cluster and by the `phalanx` CLI.

Every cluster has a token (docs/security.md): redis-server's password and
what every connection between phalanx processes proves. A cluster started
without PHALANX_CLUSTER_TOKEN gets a random one of its own, kept in its
session folder (mode 0700) in the file `token` (0600)."""
import ctypes
import os
import secrets
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


def cpp_worker_binary():
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "phalanx-cpp-worker")
    if not os.path.exists(path):
        raise UnavailableError(f"the C++ worker is missing at {path}: phalanx was built without the C++ API "
                               "(libmsgpack-cxx-dev; scripts/setup.sh installs it)")
    return path


def redis_binary():
    """The wheel's own redis-server (scripts/wheel.sh), else the one on PATH."""
    bundled = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "redis-server")
    if os.path.exists(bundled):
        return bundled
    path = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(path):
        raise UnavailableError("redis-server is not installed; run scripts/setup.sh "
                               "(it installs Debian's redis-server package)")
    return path


def _shared_root(root):
    """The folder of every user's sessions: like /tmp (anyone makes a folder
    of their own in it, nobody touches another's)."""
    try:
        os.makedirs(root, mode=0o1777, exist_ok=True)
        st = os.stat(root)
        if st.st_uid == os.getuid() and st.st_mode & 0o7777 != 0o1777:
            os.chmod(root, 0o1777)
    except PermissionError:
        pass
    if os.access(root, os.W_OK | os.X_OK):
        return root
    return private_dir(f"{root}-{os.getuid()}")  # another user's folder that we may not write in


def private_dir(path):
    """`path` as a folder only this user can enter (0700), made if missing;
    refuses one that belongs to someone else."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid():
        raise UnavailableError(f"{path} is not a folder of this user's: refusing to keep sockets or tokens in it")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def new_session_dir(root=None):
    root = _shared_root(root or os.environ.get("PHALANX_TMPDIR", "/tmp/phalanx"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):  # unique even for several clusters in one second
        path = os.path.join(root, f"session_{stamp}_{os.getpid()}" + (f"_{n}" if n else ""))
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    os.chmod(path, 0o700)  # whatever the umask
    os.makedirs(os.path.join(path, "logs"), mode=0o700, exist_ok=True)
    return path


def write_session_token(session_dir, token=None):
    """Writes the cluster's token to `session_dir`/token (0600); a new random
    one if none is given. Returns it."""
    token = token or secrets.token_hex(16)
    path = os.path.join(session_dir, "token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    return token


def read_session_token(session_dir):
    """The token kept in a session folder, or None."""
    try:
        with open(os.path.join(session_dir, "token")) as f:
            return f.read().strip() or None
    except OSError:
        return None


# What a process needs in its environment to talk to a cluster (docs/security.md).
CLUSTER_ENV = ("PHALANX_CLUSTER_TOKEN", "PHALANX_TLS")


def save_cluster_env():
    """CLUSTER_ENV's values now (None: unset), for restore_cluster_env."""
    return {k: os.environ.get(k) for k in CLUSTER_ENV}


def restore_cluster_env(saved):
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def write_session_tls(session_dir):
    """Marks a session's cluster as running with TLS (`tls` in its folder)."""
    with open(os.path.join(session_dir, "tls"), "w") as f:
        f.write("1")


def read_session_tls(session_dir):
    """Whether a session folder's cluster runs with TLS."""
    return os.path.exists(os.path.join(session_dir, "tls"))


def _tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def trace_dir(session_dir):
    """Where a session's trace rings live (core/trace.h's TraceDir): in memory, /dev/shm, where there is one."""
    base = os.path.basename(session_dir.rstrip("/"))
    if os.environ.get("PHALANX_TRACE_DIR"):
        return os.path.join(os.environ["PHALANX_TRACE_DIR"], f"phalanx-{base}-trace")
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return f"/dev/shm/phalanx-{base}-trace"
    return os.path.join(session_dir, "trace")


def _pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def remove_exited_rings(session_dir, wait_s=1.0):
    """Removes the trace rings (memory, in /dev/shm) of the session's processes
    that have exited (waiting up to `wait_s` for those still exiting), and the
    folder once empty. Rings of live processes (other nodes of a shared session) stay."""
    folder = trace_dir(session_dir)
    if not os.path.isdir(folder):
        return
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for name in os.listdir(folder):
            try:
                pid = int(name.rsplit("-", 1)[1].split(".")[0])
            except (IndexError, ValueError):
                continue
            if _pid_alive(pid):
                left.append(name)
            else:
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    try:
        os.rmdir(folder)
    except OSError:
        pass


def stop_restarted_redis(session_dir, known=(), timeout=5.0):
    """Stops the redis-server of a session that the head raylet started again
    (its pid is in the session's redis.pid, not among `known`)."""
    try:
        with open(os.path.join(session_dir, "redis.pid")) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return
    if pid <= 1 or pid in known:
        return
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"redis-server" not in f.read():
                return  # (the pid went to another process since)
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class NodeProcesses:
    """The processes this driver (or CLI) started, stopped in reverse order.

    `token`: the cluster's token; default PHALANX_CLUSTER_TOKEN, else a new
    random one for this session (written to its folder). While these
    processes run, this process's PHALANX_CLUSTER_TOKEN is that token (its
    own GCS commands present it); stop() puts the old value back.

    `tls`: every connection that can leave the machine is TLS (redis-server,
    raylet to raylet, actor workers over TCP; docs/security.md); default
    PHALANX_TLS=1 in the environment. Set in this process's environment
    (PHALANX_TLS) while the processes run, and marked in the session folder."""

    def __init__(self, session_dir, token=None, tls=None):
        self.session_dir = session_dir
        self.procs = []  # (name, Popen)
        self.redis_address = None
        self.raylet_socket = None
        self.redis_argv_file = None  # set when this started redis-server: the head raylet restarts it from it
        self._keeper_given = False
        self.token = write_session_token(session_dir, token or os.environ.get("PHALANX_CLUSTER_TOKEN"))
        self.tls = bool(tls) if tls is not None else os.environ.get("PHALANX_TLS") == "1"
        self._env_before = save_cluster_env()
        os.environ["PHALANX_CLUSTER_TOKEN"] = self.token
        if self.tls:
            write_session_tls(session_dir)
            os.environ["PHALANX_TLS"] = "1"
        else:
            os.environ.pop("PHALANX_TLS", None)

    def start_redis(self, port=None, host="127.0.0.1", tie_to_parent=True, password=None):
        if password and password != self.token:  # another token for this cluster: it becomes the session's
            self.token = write_session_token(self.session_dir, password)
            os.environ["PHALANX_CLUSTER_TOKEN"] = password
        password = self.token
        # The password goes in a file of the session folder, not on the command line (ps shows that).
        conf = os.path.join(self.session_dir, "redis.conf")
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"requirepass {password}\n")
        # Persistence (docs/fault-tolerance.md): every write goes to an
        # append-only file in the session folder, fsynced each second, so a
        # redis-server that dies is started again (by the head raylet,
        # scheduler/gcs_keeper.h) with its tables. No RDB snapshots.
        pidfile = os.path.join(self.session_dir, "redis.pid")
        for attempt in range(5):
            p = port or free_port(host)
            log = os.path.join(self.session_dir, "logs", "redis.log")
            cmd = [redis_binary(), conf, "--port", str(p), "--bind", host, "--save", "",
                   "--appendonly", "yes", "--appendfsync", "everysec", "--pidfile", pidfile,
                   "--daemonize", "no", "--logfile", log, "--dir", self.session_dir]
            if self.tls:  # TLS only: no plaintext port at all
                cmd += ["--port", "0", "--tls-port", str(p)] + self._redis_tls_args()
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
                    self.redis_argv_file = os.path.join(self.session_dir, "redis.argv")
                    fd = os.open(self.redis_argv_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
                    with os.fdopen(fd, "w") as f:
                        f.write("".join(a + "\n" for a in cmd))
                    return self.redis_address
                except Exception:
                    time.sleep(0.02)
            proc.kill()
            proc.wait()
            if port:  # a fixed port that failed will not work on retry
                break
        raise UnavailableError(f"redis-server did not start; its log {log} ends with:\n{_tail(log)}")

    def _redis_tls_args(self):
        """redis-server's TLS settings: the cluster's key (derived from the token,
        core/tls.h) as its certificate; clients prove the token with AUTH."""
        cert = os.path.join(self.session_dir, "tls-cert.pem")
        key = os.path.join(self.session_dir, "tls-key.pem")
        _core.write_tls_pem(self.token, cert, key)
        return ["--tls-cert-file", cert, "--tls-key-file", key, "--tls-auth-clients", "no"]

    def start_raylet(self, redis_address, num_cpus, object_store_memory=None, node_ip="127.0.0.1",
                     tie_to_parent=True, extra_args=(), token=None, netns=None):
        """`netns`: run it in that network namespace (`ip netns exec`), as another host."""
        tag = os.urandom(4).hex()  # several raylets may share a session folder
        sock = os.path.join(self.session_dir, f"raylet-{tag}.sock")
        if len(sock) > 100:  # Unix socket paths are limited to 107 bytes
            short = private_dir(os.path.join("/tmp", f"phalanx-{os.getuid()}"))
            sock = os.path.join(short, f"raylet-{tag}.sock")
        log = os.path.join(self.session_dir, "logs", f"raylet-{tag}.log")
        worker_cmd = f"{sys.executable} -u -m phalanx._private.worker"
        cmd = [raylet_binary(), "--socket", sock, "--session-dir", self.session_dir,
               "--redis-address", redis_address, "--worker-command", worker_cmd,
               "--num-cpus", str(num_cpus), "--node-ip", node_ip]
        if object_store_memory:
            cmd += ["--object-store-memory", str(int(object_store_memory))]
        cmd += ["--tls", "1" if self.tls else "0"]
        if self.redis_argv_file and not self._keeper_given and redis_address == self.redis_address:
            # The head raylet restarts redis-server (tied to it as the first was to us).
            cmd += ["--gcs-restart-file", self.redis_argv_file, "--gcs-restart-tied", "1" if tie_to_parent else "0"]
            self._keeper_given = True
        cmd += list(extra_args)
        if netns:
            cmd = ["ip", "netns", "exec", netns] + cmd  # it execs: the pid stays the raylet's
        env = dict(os.environ)
        # Workers import what the driver can: its script folder (when on the driver's own path, as Ray: not for
        # `python -m pkg.mod`, PEP 338) and working directory.
        script_dir = os.path.dirname(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
        if script_dir and script_dir not in {os.path.realpath(p) for p in sys.path if p}:
            script_dir = ""
        paths = [p for p in (script_dir, os.getcwd()) if p]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["PHALANX_CLUSTER_TOKEN"] = token or self.token  # inherited, never on the command line
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
        # Raylets first (they stop their workers; the head one would start a
        # redis-server that went first again), redis-server after.
        deadline = time.monotonic() + timeout
        raylets = [proc for name, proc in self.procs if name != "redis-server"]
        servers = [proc for name, proc in self.procs if name == "redis-server"]
        for group in (raylets, servers):
            for proc in reversed(group):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in reversed(group):
                try:
                    proc.wait(max(0.05, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.redis_argv_file:
            stop_restarted_redis(self.session_dir, [p.pid for p in servers])
        self.procs = []
        remove_exited_rings(self.session_dir)
        self.restore_env()

    def restore_env(self):
        """This process's PHALANX_CLUSTER_TOKEN and PHALANX_TLS as they were before (idempotent)."""
        if os.environ.get("PHALANX_CLUSTER_TOKEN") != self.token:
            return  # someone set another since
        restore_cluster_env(self._env_before)


def start_dashboard(redis_address, host, port, session_dir, tie_to_parent=True, wait_s=15.0):
    """The dashboard (`phalanx dashboard`) as a process of its own, serving the cluster at `redis_address`
    on host:port; returns its Popen once it answers (UnavailableError with its log's end if it does not)."""
    import socket
    log_path = os.path.join(session_dir, "logs", "dashboard.log")
    with open(log_path, "ab") as log:
        p = subprocess.Popen([sys.executable, "-m", "phalanx.scripts", "dashboard", "--address", redis_address,
                              "--host", host, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                             preexec_fn=_die_with_parent if tie_to_parent else None,
                             start_new_session=not tie_to_parent)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise UnavailableError(f"the dashboard exited with code {p.returncode}; its log {log_path} ends with:\n"
                                   f"{_tail(log_path)}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise UnavailableError(f"the dashboard did not answer on {host}:{port} within {wait_s} s; log {log_path}")
