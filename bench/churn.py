"""Memory under churn (docs/fault-tolerance.md): many tasks, then many 1 MiB
put/get rounds with every ref dropped, on an embedded cluster, sampling the
resident memory of the raylet and of redis-server (and the size of the GCS's
append-only file) as it goes. Flat is the goal: nothing a finished task or a
freed object leaves behind may stay.

    .venv/bin/python bench/churn.py                      # 200,000 tasks, 50,000 rounds
    .venv/bin/python bench/churn.py --tasks 20000 --rounds 5000 --json out.json

Prints one line per sample and a summary: RSS at the first and last sample
of each phase and the growth between them.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import phalanx


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def dir_mib(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total / 2**20


@phalanx.remote
def noop(i):
    return i


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=1000, help="tasks in flight at once")
    ap.add_argument("--samples", type=int, default=10, help="samples per phase")
    ap.add_argument("--json")
    a = ap.parse_args()

    info = phalanx.init(num_cpus=2, object_store_memory=1 << 30)
    session = info["session_dir"]
    node = phalanx.nodes()[0]
    raylet = node["pid"]
    redis = int(open(os.path.join(session, "redis.pid")).read())
    aof = os.path.join(session, "appendonlydir")
    samples = []

    def sample(phase, done):
        s = {"phase": phase, "done": done, "t": round(time.monotonic() - t0, 1),
             "raylet_mib": round(rss_mib(raylet), 1), "redis_mib": round(rss_mib(redis), 1),
             "aof_mib": round(dir_mib(aof), 1)}
        samples.append(s)
        print(json.dumps(s), flush=True)

    t0 = time.monotonic()
    sample("tasks", 0)
    every = max(a.batch, a.tasks // a.samples)
    done = 0
    while done < a.tasks:
        n = min(a.batch, a.tasks - done)
        out = phalanx.get([noop.remote(i) for i in range(n)], timeout=120)
        assert out[-1] == n - 1
        done += n
        if done % every < a.batch or done == a.tasks:
            sample("tasks", done)
    tasks_s = time.monotonic() - t0

    t1 = time.monotonic()
    block = np.ones(1 << 18, dtype=np.float32)  # 1 MiB
    every = max(1, a.rounds // a.samples)
    for r in range(a.rounds):
        ref = phalanx.put(block)
        v = phalanx.get(ref, timeout=60)
        assert v.nbytes == 1 << 20
        del v, ref
        if (r + 1) % every == 0 or r + 1 == a.rounds:
            sample("put_get", r + 1)
    rounds_s = time.monotonic() - t1
    phalanx.shutdown()

    def growth(phase, key):
        xs = [s[key] for s in samples if s["phase"] == phase]
        # From the sample after warm-up (the first full step) to the last.
        return round(xs[-1] - xs[min(1, len(xs) - 1)], 1)
    summary = {
        "tasks": a.tasks, "tasks_per_s": round(a.tasks / tasks_s), "rounds": a.rounds,
        "rounds_per_s": round(a.rounds / rounds_s),
        "raylet_growth_mib": {p: growth(p, "raylet_mib") for p in ("tasks", "put_get")},
        "redis_growth_mib": {p: growth(p, "redis_mib") for p in ("tasks", "put_get")},
        "aof_last_mib": samples[-1]["aof_mib"],
    }
    print(json.dumps(summary, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "samples": samples, "python": sys.version.split()[0]}, f, indent=1)


if __name__ == "__main__":
    main()
