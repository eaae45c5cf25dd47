"""Two nodes in separate network namespaces, each with its own address,
joined by a veth pair: the GCS and raylet A in one, raylet B in the other.
A task that needs what only B has crosses the emulated network to B and its
result comes back. Skipped, with the reason, where namespaces cannot be made
(not root, no iproute2). Traffic stays inside the namespaces this test makes."""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

import phalanx
from conftest import veth_namespaces
from phalanx._private.node import new_session_dir, raylet_binary, redis_binary

A_IP, B_IP = "10.78.0.1", "10.78.0.2"


@pytest.fixture
def namespaces():
    with veth_namespaces(A_IP, B_IP) as pair:
        yield pair


TOKEN = uuid.uuid4().hex  # the cluster's shared token: redis-server refuses anyone without it
METRICS_PORT = 9464  # raylet A's Prometheus endpoint (its namespace is this test's alone: nothing else holds it)

# From another host: the endpoint off loopback answers 401 without the token, the page with it.
_SCRAPE = """
import urllib.error, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
url = "http://{host}:{port}/metrics"
try:
    opener.open(url, timeout=10)
    print("without token: 200")
except urllib.error.HTTPError as e:
    print("without token:", e.code)
page = opener.open(urllib.request.Request(url, headers={{"Authorization": "Bearer {token}"}}), timeout=10).read()
print("with token:", page.decode().count("ray_tasks{{"))
"""


def _spawn(ns, cmd, log):
    with open(log, "ab") as out:
        return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=dict(os.environ, PHALANX_CLUSTER_TOKEN=TOKEN))


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@phalanx.remote(num_cpus=0)
class Keeper:
    def touch(self):
        return "alive"


_ATTACK = """
import sys
sys.path.insert(0, {tests!r})
import wire
host, port, oid, aid, marker = {host!r}, {port}, {oid!r}, {aid!r}, {marker!r}
spec = wire.task_spec(bytes(range(16)), "evil", extra=wire.field_bytes(23, ("touch " + marker).encode()))
bodies = {{wire.FORWARD_TASK: wire.forward_task(spec), wire.PULL_OBJECT: wire.pull_object(oid),
          wire.KILL_ACTOR: wire.kill_actor(aid)}}
answered = []
for t in wire.ALL_TYPES:
    s = wire.connect(host, port)
    s.sendall(wire.frame(t, bodies.get(t, b"junk")))
    if not wire.closed_without_answer(s):
        answered.append(t)
print("answered:", answered)
"""


def _listening_port(ns, pid, besides=()):
    """The TCP port process `pid` listens on in namespace `ns` (read there, so
    no traffic leaves the namespaces), other than those `besides`."""
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltnp"], capture_output=True, text=True,
                         timeout=20).stdout
    for line in out.splitlines():
        port = int(line.split()[3].rpartition(":")[2])
        if f"pid={pid}," in line and port not in besides:
            return port
    raise AssertionError(f"process {pid} listens on nothing in {ns}:\n{out}")


def _attack_from(ns, session, where, ns_a, raylet_a):
    """From namespace `ns` (another host), without the token: every message to
    raylet A is refused unread; nothing runs, nothing is returned or killed."""
    keeper = Keeper.remote()
    assert phalanx.get(keeper.touch.remote(), timeout=30) == "alive"
    secret = phalanx.put(b"s" * (1 << 20))
    port_a = _listening_port(ns_a, raylet_a.pid, besides=(METRICS_PORT,))  # (raylet A's port for other raylets)
    marker = os.path.join(session, "attack-ran")
    script = _ATTACK.format(tests=os.path.dirname(os.path.abspath(__file__)), host=A_IP, port=port_a,
                            oid=secret.binary(), aid=keeper._actor_id, marker=marker)
    env = {k: v for k, v in os.environ.items() if k != "PHALANX_CLUSTER_TOKEN"}
    p = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "answered: []" in p.stdout, p.stdout
    assert not os.path.exists(marker)
    assert phalanx.get(keeper.touch.remote(), timeout=30) == "alive"
    assert phalanx.get(secret, timeout=30) == b"s" * (1 << 20)
    assert phalanx.get(where.remote(), timeout=60)[0] == B_IP  # and the cluster still serves


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_task_crosses_to_a_node_in_another_namespace(namespaces, tls, monkeypatch):
    ns_a, ns_b = namespaces
    phalanx.shutdown()
    session = new_session_dir()
    logs = os.path.join(session, "logs")
    port = 6390  # inside a namespace made for this test alone: nothing else can hold it
    procs = []
    if tls:
        monkeypatch.setenv("PHALANX_TLS", "1")
    else:
        monkeypatch.delenv("PHALANX_TLS", raising=False)
    try:
        conf = os.path.join(session, "redis.conf")
        with open(os.open(conf, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(f"requirepass {TOKEN}\n")
        redis_args = [redis_binary(), conf, "--port", str(port), "--bind", A_IP, "--save", "", "--appendonly", "no",
                      "--dir", session]
        if tls:
            from phalanx import _core
            cert, key = os.path.join(session, "cert.pem"), os.path.join(session, "key.pem")
            _core.write_tls_pem(TOKEN, cert, key)
            redis_args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", cert, "--tls-key-file", key,
                           "--tls-auth-clients", "no"]
        redis = _spawn(ns_a, redis_args, os.path.join(logs, "redis.log"))
        procs.append(redis)
        worker = f"{sys.executable} -u -m phalanx._private.worker"
        common = ["--session-dir", session, "--redis-address", f"{A_IP}:{port}", "--worker-command", worker,
                  "--num-cpus", "1", "--heartbeat-ms", "200", "--tls", "1" if tls else "0"]
        sock_a, sock_b = os.path.join(session, "a.sock"), os.path.join(session, "b.sock")
        time.sleep(0.3)
        procs.append(_spawn(ns_a, [raylet_binary(), "--socket", sock_a, "--node-ip", A_IP,
                                   "--metrics-export-port", str(METRICS_PORT)] + common,
                            os.path.join(logs, "raylet-a.log")))
        raylet_b = _spawn(ns_b, [raylet_binary(), "--socket", sock_b, "--node-ip", B_IP,
                                 "--resources", '{"far": 1}'] + common, os.path.join(logs, "raylet-b.log"))
        procs.append(raylet_b)
        _wait(lambda: os.path.exists(sock_a) and os.path.exists(sock_b), 20, "both raylets")
        from phalanx._private import api, state
        api._connect(sock_a)
        state.mode = "driver"
        time.sleep(0.8)  # both have read the node table

        @phalanx.remote(resources={"far": 1})
        def where():
            import socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.connect((A_IP, 9))  # picks the route; sends nothing
            return s.getsockname()[0], os.getppid()
        addr, raylet_pid = phalanx.get(where.remote(), timeout=60)
        assert addr == B_IP
        # `ip netns exec` execs the raylet, so the pid is the raylet's.
        assert raylet_pid == raylet_b.pid
        assert phalanx.get([where.remote() for _ in range(5)], timeout=60)[-1][0] == B_IP

        @phalanx.remote(resources={"far": 1})
        def flip(x):
            return x[::-1]
        big = bytes(range(256)) * (12 << 10)  # 3 MiB each way, copied between the namespaces
        assert phalanx.get(flip.remote(phalanx.put(big)), timeout=60) == big[::-1]
        _attack_from(ns_b, session, where, ns_a, procs[1])
        env = {k: v for k, v in os.environ.items() if k != "PHALANX_CLUSTER_TOKEN"}
        scrape = subprocess.run(["ip", "netns", "exec", ns_b, sys.executable, "-c",
                                 _SCRAPE.format(host=A_IP, port=METRICS_PORT, token=TOKEN)],
                                capture_output=True, text=True, timeout=60, env=env)
        assert "without token: 401" in scrape.stdout and "with token: 4" in scrape.stdout, scrape.stdout + scrape.stderr
    finally:
        phalanx.shutdown()
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
