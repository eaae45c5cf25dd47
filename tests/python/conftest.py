"""Fixtures: every test talks to a real redis-server and a real raylet,
started on free ports by phalanx.init(address="local") and stopped afterwards (a new cluster even where
`phalanx start` runs one on this machine, which init() with no address would join, as Ray's)."""
import contextlib
import json
import os
import time

import pytest

import phalanx


_shared = {}


@pytest.fixture
def cluster():
    """An embedded cluster (2 CPUs, 1 GiB store) shared by consecutive tests;
    started again after a test that needed one of its own."""
    if not phalanx.is_initialized():
        _shared["info"] = phalanx.init(address="local", num_cpus=2, object_store_memory=1 << 30)
    return _shared["info"]


@pytest.fixture
def cluster_gpu():
    """A cluster of its own with the GPUs the driver reports (tests that need one skip without it)."""
    phalanx.shutdown()
    yield phalanx.init(address="local", num_cpus=4, object_store_memory=1 << 30)
    phalanx.shutdown()


@pytest.fixture
def fresh_cluster():
    """A cluster of its own, for tests that break or exhaust it."""
    phalanx.shutdown()

    def start(**kwargs):
        kwargs.setdefault("num_cpus", 2)
        if not any(k in kwargs for k in ("address", "_node_ip_address")):
            kwargs["address"] = "local"  # (a new cluster, whatever `phalanx start` runs on this machine)
        return phalanx.init(**kwargs)

    yield start
    phalanx.shutdown()


@contextlib.contextmanager
def loopback_nodes(node_resources, extra_args=()):
    """A redis-server and one 1-CPU raylet per entry of `node_resources` (its
    custom resources, or None) on loopback, with fast heartbeats (a node is
    dead after 1.5 s); the driver uses the first. Yields the NodeProcesses."""
    from phalanx._private import api, state
    from phalanx._private.node import NodeProcesses, new_session_dir
    phalanx.shutdown()
    node = NodeProcesses(new_session_dir())
    fast = ["--heartbeat-ms", "200", "--node-dead-after-ms", "1500", *extra_args]
    try:
        redis = node.start_redis()
        sockets = [node.start_raylet(redis, num_cpus=1,
                                     extra_args=fast + (["--resources", json.dumps(r)] if r else []))
                   for r in node_resources]
        node.raylet_socket = sockets[0]
        api._connect(sockets[0])
        state.mode = "driver"
        api._wait_for_nodes(len(node_resources), node.session_dir)  # every raylet sees every other
        yield node
    finally:
        phalanx.shutdown()
        node.stop()


def pytest_sessionfinish(session, exitstatus):
    phalanx.shutdown()


def wait_until(pred, timeout=30.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def proc_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def node_procs():
    """{name: Popen} of the embedded cluster's processes."""
    from phalanx._private import state
    return {name: p for name, p in state.node.procs}


@contextlib.contextmanager
def veth_namespaces(a_ip, b_ip, prefix="phx"):
    """Two network namespaces joined by a veth pair, `a_ip` and `b_ip` (/24) on its ends, loopback up in
    each; yields their names and deletes them after. Skips the test, with the reason, where namespaces
    cannot be made (not root, no iproute2)."""
    import shutil
    import subprocess
    import uuid

    def ip(*args):
        return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)

    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (ip)")
    tag = uuid.uuid4().hex[:6]
    a, b = f"{prefix}a{tag}", f"{prefix}b{tag}"
    made = []
    try:
        for ns in (a, b):
            r = ip("netns", "add", ns)
            if r.returncode != 0:
                pytest.skip(f"cannot create a network namespace here: {r.stderr.strip()}")
            made.append(ns)
        steps = [
            ("link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}"),
            ("link", "set", f"va{tag}", "netns", a),
            ("link", "set", f"vb{tag}", "netns", b),
            ("-n", a, "addr", "add", f"{a_ip}/24", "dev", f"va{tag}"),
            ("-n", b, "addr", "add", f"{b_ip}/24", "dev", f"vb{tag}"),
            ("-n", a, "link", "set", f"va{tag}", "up"),
            ("-n", b, "link", "set", f"vb{tag}", "up"),
            ("-n", a, "link", "set", "lo", "up"),
            ("-n", b, "link", "set", "lo", "up"),
        ]
        for step in steps:
            r = ip(*step)
            if r.returncode != 0:
                pytest.skip(f"cannot wire the namespaces ({' '.join(step)}): {r.stderr.strip()}")
        yield a, b
    finally:
        for ns in made:
            ip("netns", "del", ns)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def phalanx_wheel(tmp_path_factory):
    """(path, build log) of the wheel scripts/wheel.sh makes (once per test session)."""
    import glob
    import shutil
    import subprocess
    if os.geteuid() != 0 and shutil.which("sudo") is None:
        pytest.skip("scripts/build_redis.sh installs Debian's source tools: needs root or sudo")
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "wheel.sh")], cwd=ROOT, capture_output=True,
                       text=True, timeout=1500, env=dict(os.environ, WHEEL_DIR=str(out)))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    wheels = glob.glob(str(out / "phalanx-*-manylinux_*_x86_64.whl"))
    assert len(wheels) == 1, os.listdir(out)
    return wheels[0], p.stdout

