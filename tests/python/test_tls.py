"""--tls (docs/security.md): a cluster whose connections that can leave the
machine (redis-server, raylet to raylet, actor calls over TCP) are TLS 1.3
with the key every node derives from the cluster token. Two raylets on
loopback here; across network namespaces: tests/python/test_netns.py."""
import os
import socket
import ssl
import subprocess
import sys
import time

import numpy as np
import pytest

import phalanx
from phalanx import _core
from phalanx._private import state
from phalanx._private.node import raylet_binary
import wire


@pytest.fixture
def tls_cluster(monkeypatch, fresh_cluster):  # (this order: the cluster stops, then the environment is restored)
    monkeypatch.setenv("PHALANX_TLS", "1")
    fresh_cluster(num_cpus=2, num_nodes=2)
    host, _, port = state.info["gcs_address"].rpartition(":")
    return dict(host=host, port=int(port), session=state.node.session_dir)


@phalanx.remote(resources={"node:1": 1})
def _on_node_1(x):
    return x[::-1].copy()


@phalanx.remote(resources={"node:1": 1})
class _Far:
    def echo(self, x):
        return x


def _tls_client(host, port):
    """A TLS 1.3 client that accepts any certificate (the test compares it)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return ctx.wrap_socket(socket.create_connection((host, port), timeout=5))


def _cluster_cert_der(session):
    with open(os.path.join(session, "tls-cert.pem")) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def test_objects_tasks_and_actor_calls_cross_nodes_under_tls(tls_cluster):
    x = np.arange(3 << 20, dtype=np.uint8)  # 3 MiB: through the store, copied between the raylets
    assert np.array_equal(phalanx.get(_on_node_1.remote(phalanx.put(x)), timeout=60), x[::-1])
    far = _Far.remote()
    # The actor's worker is on the other raylet: calls go straight to it over TCP (TLS).
    assert phalanx.get([far.echo.remote(i) for i in range(50)], timeout=60) == list(range(50))
    assert phalanx.get(far.echo.remote(b"y" * 200_000), timeout=60) == b"y" * 200_000
    cmdlines = [" ".join(p.args) for name, p in state.node.procs if name == "raylet"]
    assert cmdlines and all("--tls 1" in c for c in cmdlines), cmdlines


@phalanx.remote(resources={"node:1": 1})
class _Rank1:
    def __init__(self, group):
        phalanx.collective.init_group(2, 1, group, timeout=60)
        self.group = group

    def calls(self):
        a = np.full(1 << 20, 2.0, np.float32)  # 4 MiB: the ring, in pieces
        phalanx.collective.allreduce(a, group_name=self.group, timeout=60)
        b = np.zeros(3, np.int64)
        phalanx.collective.broadcast(b, src_rank=0, group_name=self.group, timeout=60)
        return float(a[0]), float(a[-1]), b.tolist()


def test_a_static_groups_connections_are_tls_too(tls_cluster):
    from phalanx._private import collective_group
    other = _Rank1.remote("tls-group")
    phalanx.collective.init_group(2, 0, "tls-group", timeout=60)
    try:
        done = other.calls.remote()
        a = np.full(1 << 20, 1.0, np.float32)
        phalanx.collective.allreduce(a, group_name="tls-group", timeout=60)
        phalanx.collective.broadcast(np.array([7, 8, 9]), src_rank=0, group_name="tls-group", timeout=60)
        assert (a[0], a[-1]) == (3.0, 3.0)
        assert phalanx.get(done, timeout=60) == (3.0, 3.0, [7, 8, 9])
        # The group's TCP listener speaks TLS 1.3 with the cluster's key, as every other port.
        tcp = [x for x in collective_group._groups["tls-group"].channel.addresses if x.startswith("tcp:")]
        host, port = tcp[0][4:].rsplit(":", 1)
        with _tls_client(host, int(port)) as s:
            assert s.getpeercert(binary_form=True) == _cluster_cert_der(tls_cluster["session"])
    finally:
        phalanx.collective.destroy_group("tls-group")


def test_every_port_speaks_tls_13_with_the_clusters_key(tls_cluster):
    want = _cluster_cert_der(tls_cluster["session"])
    ports = [tls_cluster["port"]] + [n["port"] for n in phalanx.nodes() if n["alive"]]
    assert len(ports) == 3
    for port in ports:
        with _tls_client(tls_cluster["host"], port) as s:
            assert s.version() == "TLSv1.3"
            assert s.getpeercert(binary_form=True) == want


def test_plaintext_is_refused_everywhere(tls_cluster):
    # redis-server has no plaintext port: a PING in clear gets no PONG.
    s = wire.connect(tls_cluster["host"], tls_cluster["port"])
    s.sendall(b"PING\r\n")
    s.settimeout(3)
    try:
        got = s.recv(64)
    except (socket.timeout, ConnectionResetError):
        got = b""
    assert b"PONG" not in got
    # A raylet's peer port: even a peer with the token is refused without TLS.
    for n in [n for n in phalanx.nodes() if n["alive"]]:
        s = wire.connect(n["address"], n["port"])
        with pytest.raises((ConnectionError, OSError)):
            wire.handshake(s, os.environ["PHALANX_CLUSTER_TOKEN"])
            if not wire.closed_without_answer(s):
                raise AssertionError("a plaintext peer was answered")
            raise ConnectionError("closed")
    assert phalanx.get(_on_node_1.remote(np.ones(10)), timeout=60).sum() == 10  # still serving


def test_a_client_without_tls_is_told_and_never_sends_the_token_in_clear(tls_cluster, monkeypatch):
    monkeypatch.delenv("PHALANX_TLS")
    with pytest.raises(Exception, match="PHALANX_TLS"):
        _core.redis_command(tls_cluster["host"], tls_cluster["port"], ["PING"], 3.0)
    # What it sent, caught by a listener that answers nothing in Redis's protocol:
    # a PING, never the token.
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    got = bytearray()

    def serve():
        c, _ = lst.accept()
        c.settimeout(3)
        try:
            while len(got) < 4096:
                b = c.recv(4096)
                if not b:
                    break
                got.extend(b)
                if b"PING" in got:
                    c.sendall(b"\x16\x03\x03\x00\x02\x02\x28")  # a TLS alert, as a TLS port would answer
                    break
        except socket.timeout:
            pass
        c.close()
    import threading
    t = threading.Thread(target=serve)
    t.start()
    with pytest.raises(Exception, match="PHALANX_TLS"):
        _core.redis_command("127.0.0.1", lst.getsockname()[1], ["HGETALL", "nodes"], 3.0)
    t.join(10)
    lst.close()
    assert b"PING" in got
    assert os.environ["PHALANX_CLUSTER_TOKEN"].encode() not in bytes(got)


def test_a_raylet_without_tls_cannot_join_and_says_why(tls_cluster, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PHALANX_TLS"}
    sock = str(tmp_path / "plain.sock")
    p = subprocess.run([raylet_binary(), "--socket", sock, "--session-dir", tls_cluster["session"],
                        "--redis-address", f"{tls_cluster['host']}:{tls_cluster['port']}",
                        "--worker-command", f"{sys.executable} -m phalanx._private.worker", "--num-cpus", "1",
                        "--tls", "0"], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert "PHALANX_TLS" in p.stdout + p.stderr, p.stdout + p.stderr
    assert len([n for n in phalanx.nodes() if n["alive"]]) == 2
