"""Nodes under load and nodes killed (docs/fault-tolerance.md): 8 raylets on
2 busy cores are not declared dead; a raylet killed with SIGKILL under a
SPREAD load is, within its timeout, and the load completes elsewhere."""
import os
import subprocess
import sys
import threading
import time

import phalanx

from .util import children, kill9, live, loopback_nodes, raylet_logs, wait_until

FAST = ["--heartbeat-ms", "200", "--node-dead-after-ms", "1500"]


@phalanx.remote
def spin(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return os.getpid()


@phalanx.remote(max_retries=3)
def slow_square(x):
    time.sleep(0.05)
    return x * x




def test_eight_raylets_on_two_busy_cores_are_not_declared_dead():
    n = 8
    with loopback_nodes([{f"n{k}": 1} for k in range(n)], extra_args=FAST) as node:
        assert sum(x["alive"] for x in phalanx.nodes()) == n
        # Every raylet's CPU busy with a task, and the machine's cores with burners besides.
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
        try:
            refs = [spin.options(resources={f"n{k}": 1}).remote(10) for k in range(n)]
            pids = phalanx.get(refs, timeout=120)
        finally:
            for b in burners:
                b.kill()
                b.wait()
        assert len(set(pids)) == n
        time.sleep(0.5)
        nodes = phalanx.nodes()
        assert sum(x["alive"] for x in nodes) == n, [(x["node_id"][:8], x["alive"]) for x in nodes]
        assert "marking it dead" not in raylet_logs(node.session_dir)


def test_raylet_killed_under_a_spread_load_is_declared_dead_and_the_load_completes():
    with loopback_nodes([None, None, None], extra_args=FAST) as node:
        raylets = [p for name, p in node.procs if name == "raylet"]
        victim = raylets[2]
        results, errors = [], []

        def load():
            try:
                refs = [slow_square.options(scheduling_strategy="SPREAD").remote(i) for i in range(300)]
                results.extend(phalanx.get(refs, timeout=120))
            except Exception as e:
                errors.append(e)
        t = threading.Thread(target=load)
        t.start()
        time.sleep(1.0)
        workers = children(victim.pid)
        assert workers
        kill9(victim.pid)
        killed_at = time.monotonic()
        wait_until(lambda: sum(x["alive"] for x in phalanx.nodes()) == 2, timeout=20,
                   what="the killed raylet to be declared dead")
        detect_s = time.monotonic() - killed_at
        t.join(150)
        assert not t.is_alive(), "the load hung"
        assert not errors, errors
        assert results == [i * i for i in range(300)]
        assert detect_s < 1.5 + 3.0, detect_s
        # Its workers went with it: nothing of the dead node runs on.
        wait_until(lambda: not any(live(p) for p in workers), timeout=10, what="its workers to exit")
