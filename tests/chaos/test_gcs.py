"""The GCS survives redis-server (docs/fault-tolerance.md): killed with
SIGKILL mid-load, the head raylet starts it again with its AOF and every
raylet reconnects and re-publishes; an external one (--gcs-address) down for
longer than a node's death timeout comes back without a node declared dead;
one that never comes back fails named, at the deadline; a replica promoted
after its primary dies takes over."""
import contextlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import phalanx
from phalanx.exceptions import PhalanxError

from .util import RedisServer, kill9, live, loopback_nodes, raylet_logs, wait_until

FAST = ["--heartbeat-ms", "200", "--node-dead-after-ms", "1500"]


@phalanx.remote
def square(x):
    return x * x


@phalanx.remote
def block(seed):
    return np.full(1 << 18, seed, dtype=np.float32)  # 1 MiB: in the store, listed in the directory


def _node_ids():
    return sorted(n["node_id"] for n in phalanx.nodes() if n["alive"])


def _redis_pid(session_dir):
    with open(os.path.join(session_dir, "redis.pid")) as f:
        return int(f.read())




def test_redis_killed_mid_load_is_restarted_and_nothing_is_lost():
    with loopback_nodes([{"n0": 1}, {"n1": 1}], extra_args=FAST) as node:
        nodes_before = _node_ids()
        assert len(nodes_before) == 2
        far = block.options(resources={"n1": 1}).remote(7)  # on the other node: found through the directory
        phalanx.wait([far], timeout=30)
        results, errors = [], []
        stop = threading.Event()

        def load():
            i = 0
            while not stop.is_set():
                try:
                    refs = [square.options(scheduling_strategy="SPREAD").remote(i + k) for k in range(20)]
                    results.append((i, phalanx.get(refs, timeout=60)))
                except Exception as e:  # (the test fails on any)
                    errors.append(e)
                    return
                i += 20
        t = threading.Thread(target=load)
        t.start()
        time.sleep(1.0)
        pid = _redis_pid(node.session_dir)
        kill9(pid)
        wait_until(lambda: os.path.exists(os.path.join(node.session_dir, "redis.pid")) and
                   _redis_pid(node.session_dir) != pid and live(_redis_pid(node.session_dir)),
                   timeout=15, what="the head raylet to start redis-server again")
        time.sleep(3.0)  # (twice the node death timeout: a false death would show)
        stop.set()
        t.join(90)
        assert not t.is_alive(), "the load hung"
        assert not errors, errors
        assert len(results) > 5
        for i, vals in results:
            assert vals == [(i + k) ** 2 for k in range(20)]
        assert _node_ids() == nodes_before  # nobody was declared dead
        assert float(phalanx.get(far, timeout=30)[0]) == 7.0
        assert float(phalanx.get(block.options(resources={"n1": 1}).remote(3), timeout=30)[0]) == 3.0
        log = raylet_logs(node.session_dir)
        assert "started it again" in log and "GCS back: re-published" in log
        restarted = _redis_pid(node.session_dir)
    wait_until(lambda: not live(restarted), timeout=10, what="the restarted redis-server to stop with the cluster")


@contextlib.contextmanager
def raylets_on(redis, n, extra_args=()):
    """n raylets (resources n0, n1, ...) on an external GCS; the driver uses the first."""
    from phalanx._private import api, state
    from phalanx._private.node import NodeProcesses, new_session_dir
    phalanx.shutdown()
    node = NodeProcesses(new_session_dir(), redis.token)
    node.redis_address = redis.address
    try:
        socks = [node.start_raylet(redis.address, num_cpus=1,
                                   extra_args=FAST + list(extra_args) + ["--resources", json.dumps({f"n{k}": 1})])
                 for k in range(n)]
        api._connect(socks[0])
        state.mode = "driver"
        time.sleep(0.6)
        yield node
    finally:
        phalanx.shutdown()
        node.stop()


def test_external_gcs_down_longer_than_the_death_timeout_comes_back_whole(tmp_path):
    redis = RedisServer(str(tmp_path / "gcs"), secrets.token_hex(8))
    try:
        with raylets_on(redis, 2) as node:
            before = _node_ids()
            far = block.options(resources={"n1": 1}).remote(5)
            phalanx.wait([far], timeout=30)
            redis.kill()
            t0 = time.monotonic()
            # Meanwhile what needs no GCS goes on: local tasks, puts and gets.
            assert phalanx.get([square.options(resources={"n0": 1}).remote(i) for i in range(10)],
                               timeout=30) == [i * i for i in range(10)]
            ref = phalanx.put(np.arange(10))
            assert list(phalanx.get(ref)) == list(range(10))
            time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))  # twice the 1.5 s death timeout
            redis.start()  # the operator's restart: same port, same AOF
            wait_until(lambda: "GCS back" in raylet_logs(node.session_dir), timeout=15, what="the raylets to reconnect")
            time.sleep(1.0)  # (a few heartbeats: a false death would be declared now)
            assert _node_ids() == before
            assert phalanx.get(square.options(resources={"n1": 1}).remote(9), timeout=30) == 81
            assert float(phalanx.get(far, timeout=30)[0]) == 5.0
            assert "marking it dead" not in raylet_logs(node.session_dir)
    finally:
        redis.stop()


def test_gcs_gone_past_the_deadline_is_a_named_error(tmp_path):
    redis = RedisServer(str(tmp_path / "gcs"), secrets.token_hex(8))
    try:
        with raylets_on(redis, 1, extra_args=["--gcs-reconnect-timeout-ms", "2000"]) as node:
            raylet = [p for name, p in node.procs if name == "raylet"][0]
            assert phalanx.get(square.remote(3), timeout=30) == 9
            redis.kill()
            t0 = time.monotonic()
            with pytest.raises(PhalanxError) as e:
                while time.monotonic() - t0 < 30:
                    phalanx.get(square.remote(4), timeout=30)
                    time.sleep(0.1)
            assert "redis-server" in str(e.value) and "2 s" in str(e.value), str(e.value)
            assert time.monotonic() - t0 < 15
            wait_until(lambda: raylet.poll() is not None, timeout=15, what="the raylet to stop")
    finally:
        redis.stop()


PHALANX = [sys.executable, "-m", "phalanx.scripts"]


def test_cli_head_on_an_external_gcs_survives_a_replica_promotion(tmp_path, monkeypatch):
    token = secrets.token_hex(8)
    primary = RedisServer(str(tmp_path / "primary"), token)
    replica = RedisServer(str(tmp_path / "replica"), token, replica_of=primary.port)
    monkeypatch.setenv("PHALANX_TMPDIR", str(tmp_path / "cli"))
    monkeypatch.setenv("PHALANX_CLUSTER_TOKEN", token)
    env = dict(os.environ)

    def cli(*args, check=True):
        p = subprocess.run(PHALANX + list(args), capture_output=True, text=True, timeout=120, env=env)
        assert not check or p.returncode == 0, f"phalanx {' '.join(args)}:\n{p.stdout}\n{p.stderr}"
        return p
    address = f"{primary.address},{replica.address}"
    phalanx.shutdown()
    try:
        out = cli("start", "--head", "--gcs-address", address, "--num-cpus", "1", "--resources", '{"n0": 1}').stdout
        assert "GCS at " + address in out
        cli("start", "--address", address, "--num-cpus", "1", "--resources", '{"n1": 1}')
        phalanx.init(address=address)
        wait_until(lambda: len(_node_ids()) == 2, timeout=20, what="two nodes")
        far = block.options(resources={"n1": 1}).remote(2)
        assert phalanx.get([square.remote(i) for i in range(8)], timeout=30) == [i * i for i in range(8)]
        wait_until(lambda: replica.command("HLEN", "nodes") == 2, timeout=10, what="the replica to catch up")
        primary.kill()
        replica.command("REPLICAOF", "NO", "ONE")  # the operator's (or Sentinel's) promotion
        assert phalanx.get(square.options(resources={"n1": 1}).remote(6), timeout=30) == 36
        wait_until(lambda: len(_node_ids()) == 2, timeout=20, what="the node table on the new primary")
        assert float(phalanx.get(far, timeout=30)[0]) == 2.0
        status = cli("status", "--address", address).stdout
        assert "nodes (2 alive, 2 known)" in status, status
        phalanx.shutdown()
        assert "stopped 3 processes" in cli("stop").stdout  # two raylets and the job agent: the GCS is the operator's
    finally:
        phalanx.shutdown()
        cli("stop", check=False)
        primary.stop()
        replica.stop()


def test_start_head_with_gcs_address_checks_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PHALANX_TMPDIR", str(tmp_path / "cli"))
    monkeypatch.delenv("PHALANX_CLUSTER_TOKEN", raising=False)
    p = subprocess.run(PHALANX + ["start", "--head", "--gcs-address", "127.0.0.1:1"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "PHALANX_CLUSTER_TOKEN" in p.stderr
    p = subprocess.run(PHALANX + ["start", "--head", "--gcs-address", "127.0.0.1:1"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PHALANX_CLUSTER_TOKEN="x"))
    assert p.returncode != 0 and "cannot use the GCS at 127.0.0.1:1" in p.stderr, p.stderr
