"""Random kills under an RL-like load (docs/fault-tolerance.md): a trainer
(this driver) broadcasts a policy each round to simulator actors spread over
the nodes, reduces their rollouts, and runs plain tasks besides, while a
chaos thread kills, with SIGKILL, a random worker, an actor's worker, a
non-head raylet (then starts a new one in its place) or redis-server (the
head raylet starts it again). Every operation has a deadline; each ends as a
completion with the right value, a named error (a PhalanxError), a hang (its
deadline passed: must be 0) or a wrong value (must be 0).

    .venv/bin/python bench/chaos.py                          # 30 minutes, a kill every 10 s
    .venv/bin/python bench/chaos.py --minutes 3 --kill-every 5 --json docs/results/chaos.json

Prints a line per kill and a summary: operations, kills by kind,
completions, named errors, hangs, wrong values, time to detect (a node's
death seen in the node table; redis-server back; not measured for a worker,
whose raylet sees its socket close) and time to recover (from a
kill to the first operation submitted after it that completes).
"""
import argparse
import json
import os
import random
import signal
import statistics
import sys
import threading
import time

import numpy as np

import phalanx
from phalanx.exceptions import GetTimeoutError, PhalanxError

POLICY = 1 << 18   # float32s: 1 MiB
ROLLOUT = 1 << 16  # float32s: 256 KiB
VERSIONS = 10000   # versions wrap (float32 sums of up to 16 simulators stay exact)


@phalanx.remote(max_restarts=-1, max_task_retries=-1)
class Simulator:
    def __init__(self, index):
        self.index = index

    def pid(self):
        return os.getpid()

    def rollout(self, policy, version):
        if policy[0] != version or policy[-1] != version:
            return np.full(ROLLOUT, -1.0, dtype=np.float32)  # (counted as a wrong value)
        time.sleep(0.02)
        return np.full(ROLLOUT, version * 100 + self.index, dtype=np.float32)


@phalanx.remote(max_retries=-1)
def gradient(x, version):
    time.sleep(0.01)
    return x * 2 + version


def _stat(path, field):
    with open(path) as f:
        return f.read().rpartition(")")[2].split()[field]


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if int(_stat(f"/proc/{d}/stat", 1)) == pid and _stat(f"/proc/{d}/stat", 0) not in "ZX":
                    out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


class Chaos:
    def __init__(self, a):
        from phalanx._private import api, state
        from phalanx._private.node import NodeProcesses, new_session_dir
        self.a = a
        self.rng = random.Random(a.seed)
        self.node = NodeProcesses(new_session_dir())
        self.fast = ["--heartbeat-ms", "200", "--node-dead-after-ms", str(a.dead_after_ms)]
        redis = self.node.start_redis()
        self.head = self.node.start_raylet(redis, num_cpus=2, extra_args=self.fast + ["--resources", '{"head": 1}'])
        self.raylets = []  # (proc, socket) of the non-head nodes
        for _ in range(a.nodes - 1):
            self._add_node()
        self.node.raylet_socket = self.head
        api._connect(self.head)
        state.mode = "driver"
        time.sleep(1.0)
        self.lock = threading.Lock()
        self.kills = []     # {"kind", "t", "detect_s", "recover_s"}
        self.ops = {"ok": 0, "named_error": 0, "hang": 0, "wrong": 0}
        self.errors = {}
        self.wrong = []     # the first wrong values: what, when, got, expected
        self.t0 = time.monotonic()
        self.sims = [Simulator.options(scheduling_strategy="SPREAD").remote(i) for i in range(a.sims)]
        phalanx.get([s.pid.remote() for s in self.sims], timeout=60)
        self.stop = threading.Event()

    def _add_node(self):
        sock = self.node.start_raylet(self.node.redis_address, num_cpus=2, extra_args=self.fast)
        proc = [p for name, p in self.node.procs if name == "raylet"][-1]
        self.raylets.append((proc, sock))

    def _raylet_pids(self):
        return [self.node.procs[1][1].pid] + [p.pid for p, _ in self.raylets if p.poll() is None]

    # ---- the load ----
    def outcome(self, what, fn, expect):
        """Runs one operation (`fn` gives its value); True for a completion
        with the value `expect`. A wrong value is kept, with what it was."""
        try:
            got = fn()
            ok = got == expect
            kind = "ok" if ok else "wrong"
            if not ok:
                with self.lock:
                    if len(self.wrong) < 50:
                        self.wrong.append({"t": round(time.monotonic() - self.t0, 1), "op": what, "got": got,
                                           "expected": expect})
                        print(f"[{time.monotonic() - self.t0:7.1f} s] WRONG VALUE: {what}: got {got}, "
                              f"expected {expect}", flush=True)
        except GetTimeoutError:
            kind = "hang"
        except PhalanxError as e:
            kind = "named_error"
            with self.lock:
                key = f"{type(e).__name__}: {str(e)[:90]}"
                self.errors[key] = self.errors.get(key, 0) + 1
        with self.lock:
            self.ops[kind] += 1
            if kind == "ok":
                t = time.monotonic()
                for k in self.kills:
                    if k["recover_s"] is None and k["submitted_after"] and k["t"] < k["submitted_after"] <= t:
                        k["recover_s"] = round(t - k["t"], 3)
        return kind == "ok"

    def round(self, round_no):
        # The values are float32s, exact up to 2**24: the version they carry
        # wraps so that the reduce's sum stays exact (a 30-minute run passes
        # 27,962 rounds, where 6 rollouts of version * 100 + i no longer are).
        version = 1 + round_no % VERSIONS
        started = time.monotonic()
        with self.lock:
            for k in self.kills:
                if k["recover_s"] is None and k["submitted_after"] is None and k["t"] < started:
                    k["submitted_after"] = started
        deadline = self.a.deadline
        policy = phalanx.put(np.full(POLICY, version, dtype=np.float32))
        rollouts = [s.rollout.remote(policy, version) for s in self.sims]
        grads = [gradient.remote(np.full(1000, version, dtype=np.float32), version) for _ in range(self.a.tasks)]
        for i, r in enumerate(rollouts):
            self.outcome(f"rollout of simulator {i} ({r.hex()[:16]})",
                         lambda r=r: float(phalanx.get(r, timeout=deadline)[0]), float(version * 100 + i))
        for k, g in enumerate(grads):
            self.outcome(f"task {k} ({g.hex()[:16]})", lambda g=g: float(phalanx.get(g, timeout=deadline)[0]),
                         float(3 * version))
        total = phalanx.collective.reduce(rollouts, op="sum")
        expect = sum(version * 100 + i for i in range(self.a.sims))
        self.outcome(f"reduce ({total.hex()[:16]})", lambda: float(phalanx.get(total, timeout=deadline)[0]),
                     float(expect))

    # ---- the kills ----
    def kill_one(self):
        kinds = ["worker", "actor", "raylet", "redis"]
        kind = self.rng.choice(kinds)
        t = time.monotonic()
        rec = {"kind": kind, "t": t, "detect_s": None, "recover_s": None, "submitted_after": None}
        if kind == "worker" or kind == "actor":
            actor_pids = set()
            for s in self.sims:
                try:
                    actor_pids.add(phalanx.get(s.pid.remote(), timeout=5))
                except PhalanxError:
                    pass
            workers = [w for r in self._raylet_pids() for w in _children(r) if _is_worker(w)]
            pool = [w for w in workers if (w in actor_pids) == (kind == "actor")]
            if not pool:
                return
            victim = self.rng.choice(pool)
            os.kill(victim, signal.SIGKILL)
            # (detection not measured: its raylet sees its socket close at once)
        elif kind == "raylet":
            live = [(p, s) for p, s in self.raylets if p.poll() is None]
            if not live:
                return
            proc, _ = self.rng.choice(live)
            before = sum(n["alive"] for n in phalanx.nodes())
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            t_end = time.monotonic() + 30
            while time.monotonic() < t_end and sum(n["alive"] for n in phalanx.nodes()) >= before:
                time.sleep(0.05)
            rec["detect_s"] = round(time.monotonic() - t, 3)
            self._add_node()  # capacity back
        else:
            pidfile = os.path.join(self.node.session_dir, "redis.pid")
            pid = int(open(pidfile).read())
            os.kill(pid, signal.SIGKILL)
            t_end = time.monotonic() + 30
            while time.monotonic() < t_end:
                try:
                    new = int(open(pidfile).read())
                    if new != pid and os.path.exists(f"/proc/{new}") and phalanx.nodes():
                        break
                except (OSError, ValueError, PhalanxError):
                    pass
                time.sleep(0.05)
            rec["detect_s"] = round(time.monotonic() - t, 3)
        with self.lock:
            self.kills.append(rec)
        print(f"[{time.monotonic() - self.t0:7.1f} s] killed a {kind}; detected in {rec['detect_s']} s; "
              f"ops so far {self.ops}", flush=True)

    def chaos_loop(self):
        while not self.stop.wait(self.rng.uniform(0.5, 1.5) * self.a.kill_every):
            try:
                self.kill_one()
            except Exception as e:  # (a kill that could not be made is not the runtime's failure)
                print(f"chaos: could not kill: {e!r}", flush=True)

    def run(self):
        self.t0 = time.monotonic()
        t = threading.Thread(target=self.chaos_loop, daemon=True)
        t.start()
        version = 0
        end = self.t0 + self.a.minutes * 60
        while time.monotonic() < end:
            version += 1
            self.round(version)
        self.stop.set()
        t.join(60)
        # A last round after the dust settles: everything must work.
        time.sleep(2 * self.a.dead_after_ms / 1000)
        version += 1
        self.round(version)
        return version

    def close(self):
        phalanx.shutdown()
        self.node.stop()


def _is_worker(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        return b"phalanx._private.worker" in cmdline or cmdline.startswith(b"ray::")  # (a worker's title: ray::f)
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--kill-every", type=float, default=10.0, help="mean seconds between kills")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--sims", type=int, default=6)
    ap.add_argument("--tasks", type=int, default=8, help="plain tasks per round")
    ap.add_argument("--deadline", type=float, default=60.0, help="seconds an operation may take before it is a hang")
    ap.add_argument("--dead-after-ms", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not 1 <= a.sims <= 16:
        ap.error("--sims takes 1 to 16 (the float32 sums stay exact)")
    c = Chaos(a)
    try:
        rounds = c.run()
    finally:
        c.close()
    by_kind = {}
    for k in c.kills:
        by_kind.setdefault(k["kind"], []).append(k)

    def med(xs):
        xs = [x for x in xs if x is not None]
        return round(statistics.median(xs), 3) if xs else None
    summary = {
        "minutes": a.minutes, "nodes": a.nodes, "simulators": a.sims, "rounds": rounds,
        "operations": sum(c.ops.values()), "kills": len(c.kills),
        "kills_by_kind": {k: len(v) for k, v in by_kind.items()},
        "completions": c.ops["ok"], "named_errors": c.ops["named_error"], "hangs": c.ops["hang"],
        "wrong_values": c.ops["wrong"],
        "detect_s_median": {k: med([x["detect_s"] for x in v]) for k, v in by_kind.items()},
        "recover_s_median": {k: med([x["recover_s"] for x in v]) for k, v in by_kind.items()},
        "recover_s_max": max([x["recover_s"] for x in c.kills if x["recover_s"] is not None], default=None),
        "errors": c.errors,
        "wrong_examples": c.wrong,
    }
    print(json.dumps(summary, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "kills": c.kills}, f, indent=1)
    return 0 if summary["hangs"] == 0 and summary["wrong_values"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
