"""Actors under kills (docs/fault-tolerance.md): state kept across restarts
with __phalanx_checkpoint__ / __phalanx_restore__ (on a timer, and when
asked), restored before retried calls run, also when the actor's node dies;
an actor killed mid-stream of calls with and without restarts."""
import os
import signal
import threading
import time

import pytest

import phalanx
from phalanx.exceptions import ActorDiedError

from .util import children, kill9, loopback_nodes

FAST = ["--heartbeat-ms", "200", "--node-dead-after-ms", "1500"]


@phalanx.remote
class Counter:
    def __init__(self):
        self.n = 0
        self.restored = None

    def add(self, k):
        self.n += k
        return self.n

    def slow_add(self, k):
        time.sleep(0.005)
        return self.add(k)

    def pid(self):
        return os.getpid()

    def info(self):
        return self.n, self.restored

    def __phalanx_checkpoint__(self):
        return {"n": self.n}

    def __phalanx_restore__(self, state):
        self.n = state["n"]
        self.restored = state["n"]


def test_state_kept_when_asked_comes_back_after_a_restart(fresh_cluster):
    fresh_cluster()
    c = Counter.options(max_restarts=1, max_task_retries=1).remote()
    for _ in range(7):
        phalanx.get(c.add.remote(1))
    assert phalanx.checkpoint(c) is True
    phalanx.get(c.add.remote(100))  # (after the checkpoint: lost with the worker)
    kill9(phalanx.get(c.pid.remote()))
    assert phalanx.get(c.info.remote(), timeout=30) == (7, 7)


def test_periodic_checkpoints_and_calls_in_flight_replay_on_the_restored_state(fresh_cluster):
    fresh_cluster()
    c = Counter.options(max_restarts=-1, max_task_retries=-1, checkpoint_interval_s=0.1).remote()
    for _ in range(10):
        phalanx.get(c.add.remote(1))
    time.sleep(0.2)
    assert phalanx.get(c.add.remote(1)) == 11  # (due: this call is followed by a checkpoint at 11)
    time.sleep(0.3)
    pid = phalanx.get(c.pid.remote())
    kill9(pid)
    # A call sent after the death is retried on the restored actor.
    assert phalanx.get(c.add.remote(5), timeout=30) == 16
    n, restored = phalanx.get(c.info.remote(), timeout=30)
    assert restored == 11 and n == 16


def test_without_restore_a_restart_starts_fresh_and_options_are_checked(fresh_cluster):
    fresh_cluster()

    @phalanx.remote
    class Plain:
        def ping(self):
            return 1
    with pytest.raises(ValueError, match="__phalanx_checkpoint__"):
        Plain.options(checkpoint_interval_s=1).remote()
    with pytest.raises(ValueError, match="checkpoint_interval_s"):
        Counter.options(checkpoint_interval_s=0).remote()
    with pytest.raises(ValueError, match="no __phalanx_checkpoint__"):
        phalanx.checkpoint(Plain.remote())


def test_a_checkpoint_survives_its_node_and_the_actor_is_restored_elsewhere():
    with loopback_nodes([{"home": 1}, {"spot": 1}, {"spot": 1}], extra_args=FAST) as node:
        c = Counter.options(max_restarts=1, max_task_retries=1, resources={"spot": 0.5}).remote()
        for _ in range(4):
            phalanx.get(c.add.remote(2))
        phalanx.checkpoint(c)
        pid = phalanx.get(c.pid.remote())
        host = [n for n in phalanx.nodes() if n["alive"] and pid in children(n["pid"])]
        assert len(host) == 1
        raylet = [p for name, p in node.procs if name == "raylet" and p.pid == host[0]["pid"]][0]
        raylet.send_signal(signal.SIGKILL)
        raylet.wait()
        assert phalanx.get(c.info.remote(), timeout=60) == (8, 8)
        assert phalanx.get(c.pid.remote(), timeout=30) != pid


def test_an_actor_killed_mid_stream_of_calls(fresh_cluster):
    fresh_cluster()
    # With restarts and retries: every call completes, in order; the
    # restarted actor (no checkpoint) counts again from its constructor's state.
    c = Counter.options(max_restarts=-1, max_task_retries=-1).remote()
    pid = phalanx.get(c.pid.remote())
    refs = [c.slow_add.remote(1) for _ in range(200)]
    threading.Timer(0.3, lambda: os.kill(pid, signal.SIGKILL)).start()
    out = phalanx.get(refs, timeout=60)
    resets = [i for i in range(1, len(out)) if out[i] != out[i - 1] + 1]
    assert len(out) == 200 and len(resets) == 1 and out[resets[0]] == 1, out
    # Without restarts: the calls after the death end with ActorDiedError, none hangs.
    d = Counter.remote()
    pid = phalanx.get(d.pid.remote())
    refs = [d.slow_add.remote(1) for _ in range(200)]
    threading.Timer(0.3, lambda: os.kill(pid, signal.SIGKILL)).start()
    done, died = 0, 0
    t0 = time.monotonic()
    for r in refs:
        try:
            phalanx.get(r, timeout=30)
            done += 1
        except ActorDiedError:
            died += 1
    assert done + died == 200 and died > 0
    assert time.monotonic() - t0 < 30
