"""The wire, tried as an attacker would (issue 15): without the cluster token
no message is acted on, on the raylet's TCP port or an actor worker's; with
it, nothing a peer sends runs a command or allocates by a declared size;
another local user gets nowhere; no descriptor leaks into workers.

The same from another host (a network namespace): tests/python/test_netns.py."""
import os
import resource
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import phalanx
from conftest import node_procs, proc_rss_bytes, wait_until
import wire


def _raylet_address():
    n = [n for n in phalanx.nodes() if n["alive"]][0]
    return n["address"], n["port"]


def _token():
    return os.environ["PHALANX_CLUSTER_TOKEN"]  # the embedded cluster's own (NodeProcesses sets it)


@phalanx.remote(num_cpus=0)
class Keeper:
    def __init__(self):
        self.calls = 0

    def touch(self):
        self.calls += 1
        return self.calls


@pytest.fixture
def victim(fresh_cluster, tmp_path):
    """A cluster with something worth attacking: an actor, a stored object."""
    fresh_cluster(num_cpus=2)
    keeper = Keeper.remote()
    assert phalanx.get(keeper.touch.remote()) == 1
    secret = np.arange(1 << 18, dtype=np.int64)  # 2 MiB, in the store
    ref = phalanx.put(secret)
    return dict(keeper=keeper, ref=ref, secret=secret, marker=tmp_path / "ran")


def _bodies(victim):
    """A body per message type: the dangerous ones well-formed, the rest junk."""
    spec = wire.task_spec(os.urandom(16), "evil",
                          # field 23 was worker_command: the command a raylet ran
                          extra=wire.field_bytes(23, f"touch {victim['marker']}".encode()))
    return {wire.FORWARD_TASK: wire.forward_task(spec),
            wire.PULL_OBJECT: wire.pull_object(victim["ref"].binary()),
            wire.KILL_ACTOR: wire.kill_actor(victim["keeper"]._actor_id)}


def _still_serving(victim):
    assert not victim["marker"].exists(), "a command sent by the peer ran"
    assert phalanx.get(victim["keeper"].touch.remote()) >= 2, "the actor was killed"
    assert np.array_equal(phalanx.get(victim["ref"]), victim["secret"])
    assert phalanx.get(phalanx.remote(lambda: 7).remote()) == 7


def test_the_raylet_port_acts_on_nothing_from_a_peer_without_the_token(victim):
    host, port = _raylet_address()
    bodies = _bodies(victim)
    for t in wire.ALL_TYPES:
        s = wire.connect(host, port)
        s.sendall(wire.frame(t, bodies.get(t, b"\x0a\x04junk")))
        assert wire.closed_without_answer(s), f"message type {t} got an answer"
        s.close()
    # A handshake with the wrong token: the raylet's proof does not check out
    # for us, and a forged proof closes the connection.
    s = wire.connect(host, port)
    with pytest.raises(ConnectionError, match="does not hold the token"):
        wire.handshake(s, "not-the-token")
    s.sendall(wire.frame(wire.AUTH_PROOF, wire.field_bytes(1, b"\x00" * 32), request_id=0))
    s.sendall(wire.frame(wire.FORWARD_TASK, bodies[wire.FORWARD_TASK]))
    assert wire.closed_without_answer(s)
    s.close()
    time.sleep(0.5)
    _still_serving(victim)


def test_with_the_token_the_same_harness_is_answered(victim):
    # The control for the test above: this harness can talk to the raylet.
    host, port = _raylet_address()
    s = wire.connect(host, port)
    wire.handshake(s, _token())
    s.sendall(wire.frame(wire.PULL_OBJECT, wire.pull_object(victim["ref"].binary(), length=64), request_id=9))
    reply = wire.read_frame(s)
    assert reply is not None and reply[0] == wire.PULL_OBJECT and reply[1] == wire.REPLY and reply[2] == 9
    body = reply[3]  # u32 length of the PullObjectReply, the reply, then the range's bytes
    n = int.from_bytes(body[:4], "little")
    assert wire.parse(body[4:4 + n])[2][0] == 2  # IN_STORE
    assert len(body) - 4 - n == 64
    s.close()


def test_a_forwarded_task_runs_no_command_it_carries(victim):
    # Even an authenticated peer decides only which registered function runs,
    # never which program: the old worker_command field is ignored.
    host, port = _raylet_address()
    s = wire.connect(host, port)
    wire.handshake(s, _token())
    s.sendall(wire.frame(wire.FORWARD_TASK, _bodies(victim)[wire.FORWARD_TASK], request_id=3))
    s.settimeout(60)
    reply = wire.read_frame(s)  # the task fails (no such function); nothing is started for it
    assert b"evil" in reply[3]
    assert reply is not None and reply[2] == 3
    s.close()
    _still_serving(victim)


def test_num_returns_of_2_31_is_an_error_not_an_allocation(victim):
    raylet = node_procs()["raylet"].pid
    before = proc_rss_bytes(raylet)
    host, port = _raylet_address()
    s = wire.connect(host, port)
    wire.handshake(s, _token())
    spec = wire.task_spec(os.urandom(16), "many", num_returns=2**31 - 1)
    s.sendall(wire.frame(wire.FORWARD_TASK, wire.forward_task(spec), request_id=5))
    reply = wire.read_frame(s)
    s.close()
    status = wire.parse(wire.parse(reply[3])[1][0])
    assert status[1][0] == 1  # InvalidArgument
    assert b"num_returns" in status[2][0]
    assert proc_rss_bytes(raylet) - before < 8 << 20
    with pytest.raises(ValueError, match="num_returns"):
        phalanx.remote(lambda: 1).options(num_returns=2**31 - 1)
    _still_serving(victim)


def _growth_under_flood(pid, connect, n, first_bytes, token=None):
    """How much `pid`'s RSS grows while `n` connections (made by `connect`,
    authenticated with `token` if given) have each sent `first_bytes`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1000), hard))
    before = proc_rss_bytes(pid)
    socks = []
    try:
        for _ in range(n):
            s = connect()
            if token:
                wire.handshake(s, token)
            s.sendall(first_bytes)
            socks.append(s)
        time.sleep(1.0)
        return proc_rss_bytes(pid) - before
    finally:
        for s in socks:
            s.close()


def test_a_thousand_connections_declaring_a_gibibyte_cost_the_raylet_nothing(victim):
    raylet = node_procs()["raylet"].pid
    host, port = _raylet_address()
    tcp = lambda: wire.connect(host, port)  # noqa: E731
    grown = _growth_under_flood(raylet, tcp, 1000, wire.frame(wire.FORWARD_TASK, length=1 << 30))  # headers alone
    assert grown < 8 << 20, f"the raylet grew by {grown >> 20} MiB"
    # Peers that hold the token are bounded too: a body declared at 500 MiB
    # costs what arrives (1 KiB here), not what is declared.
    grown = _growth_under_flood(raylet, tcp, 100, wire.frame(wire.FORWARD_TASK, length=500 << 20) + b"\x0a" * 1024,
                                token=_token())
    assert grown < 8 << 20, f"the raylet grew by {grown >> 20} MiB for 100 KiB received"
    # And its Unix socket (this user's own processes): the same rule.
    sock_path = [n for n in phalanx.nodes() if n["alive"]][0]["socket_path"]

    def unix():
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock_path)
        return s
    grown = _growth_under_flood(raylet, unix, 100, wire.frame(wire.SUBMIT_TASK, length=500 << 20) + b"\x0a" * 1024)
    assert grown < 8 << 20, f"the raylet grew by {grown >> 20} MiB on its Unix socket"
    _still_serving(victim)


def test_an_actor_workers_direct_port_acts_on_nothing_without_the_token(victim):
    gcs_host, _, gcs_port = phalanx._private.state.info["gcs_address"].rpartition(":")
    from phalanx import _core
    actor = [a for a in _core.gcs_actors(gcs_host, int(gcs_port)) if a["state"] == "ALIVE"][0]
    assert actor["worker_port"] > 0
    direct = lambda: wire.connect(actor["worker_host"], actor["worker_port"])  # noqa: E731
    for t in (wire.DIRECT_HELLO, wire.DIRECT_CALL, wire.KILL_ACTOR, wire.FORWARD_TASK):
        s = direct()
        s.sendall(wire.frame(t, b"\x0a\x04junk"))
        assert wire.closed_without_answer(s), f"message type {t} got an answer"
        s.close()
    s = direct()
    with pytest.raises(ConnectionError):
        wire.handshake(s, "not-the-token")
    s.close()
    grown = _growth_under_flood(actor["pid"], direct, 1000, wire.frame(wire.DIRECT_CALL, length=1 << 30))
    assert grown < 8 << 20, f"the actor's worker grew by {grown >> 20} MiB"
    assert phalanx.get(victim["keeper"].touch.remote()) == 2  # no call from the attacker ran
    _still_serving(victim)


def test_an_actor_worker_closes_a_connection_of_its_callers_that_sends_results(victim):
    # Results come back on connections the worker opened, never on its
    # callers': one that brings some (from a peer holding the token) is
    # closed, not read as results (the thread reading a caller's socket may
    # hold the lock that reading results takes).
    gcs_host, _, gcs_port = phalanx._private.state.info["gcs_address"].rpartition(":")
    from phalanx import _core
    actor = [a for a in _core.gcs_actors(gcs_host, int(gcs_port)) if a["state"] == "ALIVE"][0]
    s = wire.connect(actor["worker_host"], actor["worker_port"])
    wire.handshake(s, _token())
    s.sendall(wire.frame(wire.DIRECT_DONE, wire.field_bytes(1, os.urandom(16))))
    assert wire.closed_without_answer(s), "a caller's connection that sent results stayed open"
    s.close()
    _still_serving(victim)


def test_a_silent_peer_is_closed_after_the_handshake_deadline(victim):
    host, port = _raylet_address()
    s = wire.connect(host, port)
    start = time.monotonic()
    assert wire.closed_without_answer(s, timeout=15)
    assert 3 < time.monotonic() - start < 12
    s.close()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to run a process as another user (setpriv)")
def test_another_local_user_can_neither_connect_nor_read_the_token(victim):
    info = phalanx._private.state.info
    session = info["session_dir"]
    sock_path = [n for n in phalanx.nodes() if n["alive"]][0]["socket_path"]
    host, port = _raylet_address()
    probe = textwrap.dedent(f"""
        import socket, struct, sys
        out = []
        try:
            open({os.path.join(session, "token")!r}).read()
            out.append("token-read")
        except PermissionError:
            out.append("token-denied")
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect({sock_path!r})
            out.append("unix-connected")
        except PermissionError:
            out.append("unix-denied")
        t = socket.create_connection(({host!r}, {port}), timeout=5)
        t.sendall(struct.pack("<IHHQ", 0, 13, 0, 1))  # GET_STATS, without a handshake
        t.settimeout(10)
        out.append("tcp-closed" if t.recv(1) == b"" else "tcp-answered")
        print(" ".join(out))
    """)
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                        probe], capture_output=True, text=True, timeout=60, cwd="/")
    assert p.stdout.split() == ["token-denied", "unix-denied", "tcp-closed"], p.stdout + p.stderr
    _still_serving(victim)


def _fd_flags(pid):
    """{fd: (flags, target)} of a process."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                flags = int([ln for ln in f if ln.startswith("flags:")][0].split()[1], 8)
            out[int(fd)] = (flags, os.readlink(f"/proc/{pid}/fd/{fd}"))
        except (OSError, IndexError):
            continue
    return out


def test_every_descriptor_of_the_raylet_is_close_on_exec(victim):
    raylet = node_procs()["raylet"].pid
    leaky = {fd: target for fd, (flags, target) in _fd_flags(raylet).items()
             if fd > 2 and not flags & 0o2000000}
    assert leaky == {}, f"descriptors a worker would inherit: {leaky}"


def test_a_process_a_task_starts_inherits_nothing_of_phalanx(victim):
    @phalanx.remote
    def children_fds():
        import subprocess
        # close_fds=False: whatever is not close-on-exec reaches the child.
        out = subprocess.run(["ls", "-l", "/proc/self/fd"], capture_output=True, text=True, close_fds=False)
        return out.stdout

    listing = phalanx.get(children_fds.remote())
    assert "socket:" not in listing and "memfd" not in listing and "phalanx" not in listing, listing


def test_resources_must_be_finite(cluster):
    f = phalanx.remote(lambda: 1)
    for bad in (float("nan"), float("inf"), -1.0, 1e13, 0.00001, "1"):
        why = {-1.0: "cannot be negative", 0.00001: "cannot go beyond 0.0001", "1": "must be"}.get(bad, "finite number")
        with pytest.raises(ValueError, match="only accepts None, 0 or a positive number" if bad == -1.0 else why):
            f.options(num_cpus=bad)  # (a task's num_cpus: Ray's task options' words)
        with pytest.raises(ValueError, match=why):
            f.options(resources={"sim": bad})
        with pytest.raises(ValueError, match=why):
            Keeper.options(num_gpus=bad)


def test_get_takes_an_infinite_timeout_and_refuses_nan(cluster):
    assert phalanx.get(phalanx.put(5), timeout=float("inf")) == 5
    with pytest.raises(ValueError, match="timeout"):
        phalanx.get(phalanx.put(5), timeout=float("nan"))
