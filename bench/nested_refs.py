"""Nested refs across nodes, many rounds: does anything leak?

Two raylets on loopback (the driver's and a far one). Each round the driver
puts a small value and a 200 KiB array (a store object), passes both refs
nested in a list to an actor on the far node, which keeps them until the
next round (so they outlive the driver's own refs) and returns the sum of
the previous round's values, and nests them in a dict for a task on the far
node, which reads them and returns a ref it made there (a ref inside a
result). The driver reads that ref's value and drops everything. Rounds run
with a window in flight.

Every --sample rounds it records, on both nodes, the raylet's object entries,
inline and store objects, store bytes and resident memory. Nothing may grow
with the number of rounds: the last sample is compared with the first, and
after the last round everything must go back to where it started.

    .venv/bin/python bench/nested_refs.py                 # 100,000 rounds
    .venv/bin/python bench/nested_refs.py --rounds 5000   # a short run
    .venv/bin/python bench/nested_refs.py --peer ray      # then the same rounds on Ray (two nodes), for the rate

Ray's run measures the rate only (its raylet's counters are not read here).
"""
import argparse
import gc
import json
import os
import sys
import time

import numpy as np

import phalanx
from phalanx import NodeAffinitySchedulingStrategy


class Keeper:
    def __init__(self, runtime="phalanx"):
        import importlib
        self.rt = importlib.import_module(runtime)
        self.kept = None

    def swap(self, refs):
        prev, self.kept = self.kept, refs
        if prev is None:
            return 0.0
        small, arr = self.rt.get(prev, timeout=60)
        return float(small) + float(arr[0])

    def drop(self):
        self.kept = None
        gc.collect()


def far_read(d):
    small, arr = phalanx.get(d["refs"], timeout=60)
    return phalanx.put(float(small) * 2 + float(arr[-1]))


def far_stats():
    return phalanx.cluster_stats()


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_rounds(rt, keeper, read, rounds, window, sample_every, on_sample):
    """The rounds, on phalanx or Ray (`rt`): (seconds, sum of values read, the sum expected)."""
    arr = np.zeros(25_600, dtype=np.float64)  # 200 KiB: over the inline limit, a store object
    inflight = []
    expect_sum = got_sum = 0.0
    t0 = time.perf_counter()
    for i in range(rounds):
        arr_ref = rt.put(arr)
        small_ref = rt.put(i)
        refs = [small_ref, arr_ref]
        inflight.append((keeper.swap.remote(refs), read.remote({"refs": refs})))
        expect_sum += (i - 1 if i > 0 else 0.0) + i * 2
        del refs, arr_ref, small_ref
        if len(inflight) >= window:
            swapped, made = inflight.pop(0)
            got_sum += rt.get(swapped, timeout=60) + rt.get(rt.get(made, timeout=60), timeout=60)
            del swapped, made
        if on_sample and (i + 1) % sample_every == 0:
            on_sample(i + 1)
    while inflight:
        swapped, made = inflight.pop(0)
        got_sum += rt.get(swapped, timeout=60) + rt.get(rt.get(made, timeout=60), timeout=60)
        del swapped, made
    return time.perf_counter() - t0, got_sum, expect_sum


def ray_rate(rounds, window):
    """The same rounds on Ray: a head and a far node (ray.cluster_utils), rounds/s."""
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as RayAffinity

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    far_node = cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        cluster.wait_for_nodes()
        far = RayAffinity(far_node.node_id, soft=False)
        keeper = ray.remote(Keeper).options(scheduling_strategy=far).remote("ray")
        read = ray.remote(_ray_far_read).options(scheduling_strategy=far)
        ray.get(keeper.swap.remote([ray.put(0)]))
        ray.get(keeper.drop.remote())
        elapsed, got, want = run_rounds(ray, keeper, read, rounds, window, 0, None)
        return rounds / elapsed, got == want
    finally:
        ray.shutdown()
        cluster.shutdown()


def _ray_far_read(d):
    import ray
    small, arr = ray.get(d["refs"], timeout=60)
    return ray.put(float(small) * 2 + float(arr[-1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=32, help="rounds in flight")
    ap.add_argument("--sample", type=int, default=0, help="rounds between samples (default: rounds / 10)")
    ap.add_argument("--json", help="write the samples and the verdict here")
    ap.add_argument("--peer", choices=["none", "ray"], default="none", help="also run the rounds on Ray")
    ap.add_argument("--peer-rounds", type=int, default=10_000, help="rounds for the peer (default 10,000)")
    args = ap.parse_args()
    sample_every = args.sample or max(1, args.rounds // 10)

    phalanx.init(num_nodes=2, num_cpus=2)
    from phalanx._private import state
    here_id = phalanx.get_node_id()
    far_id = next(n["node_id"] for n in phalanx.nodes() if n["node_id"] != here_id and n["alive"])
    far = NodeAffinitySchedulingStrategy(far_id, soft=False)
    raylets = [p.pid for name, p in state.node.procs if name == "raylet"]
    keeper = phalanx.remote(Keeper).options(scheduling_strategy=far).remote()
    read = phalanx.remote(far_read).options(scheduling_strategy=far)
    stats_far = phalanx.remote(far_stats).options(scheduling_strategy=far)

    def sample(rounds_done, t0):
        gc.collect()
        h = phalanx.cluster_stats()
        f = phalanx.get(stats_far.remote(), timeout=60)
        return {"rounds": rounds_done, "seconds": round(time.perf_counter() - t0, 2),
                "here": {k: h[k] for k in ("ref_entries", "inline_objects", "store_objects", "store_used")},
                "far": {k: f[k] for k in ("ref_entries", "inline_objects", "store_objects", "store_used")},
                "raylet_rss_mib": [round(rss(p) / 2**20, 1) for p in raylets]}

    phalanx.get(keeper.swap.remote([phalanx.put(0)]), timeout=60)
    phalanx.get(keeper.drop.remote(), timeout=60)
    t0 = time.perf_counter()
    base = sample(0, t0)
    samples = []

    def on_sample(done):
        s = sample(done, t0)
        samples.append(s)
        print(f"{s['rounds']:>8} rounds {s['seconds']:>7.1f} s  here: {s['here']['ref_entries']:>5} entries "
              f"{s['here']['store_objects']:>4} store objects  far: {s['far']['ref_entries']:>5} entries "
              f"{s['far']['store_objects']:>4} store objects  raylet RSS {s['raylet_rss_mib']} MiB", flush=True)
    elapsed, got_sum, expect_sum = run_rounds(phalanx, keeper, read, args.rounds, args.window, sample_every,
                                              on_sample)
    phalanx.get(keeper.drop.remote(), timeout=60)

    deadline = time.monotonic() + 30
    while True:
        end = sample(args.rounds, t0)
        back = all(end[n][k] <= base[n][k] + (2 if n == "far" else 0)
                   for n in ("here", "far") for k in ("ref_entries", "store_objects"))
        if back or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    first, last = samples[0], samples[-1]
    growth = {n: last[n]["ref_entries"] - first[n]["ref_entries"] for n in ("here", "far")}
    rss_growth = [b - a for a, b in zip(first["raylet_rss_mib"], last["raylet_rss_mib"])]
    ok = back and got_sum == expect_sum and all(abs(g) <= 2 * args.window + 8 for g in growth.values())
    print(f"{args.rounds} rounds in {elapsed:.1f} s ({args.rounds / elapsed:,.0f} rounds/s, "
          f"{2 * args.rounds / elapsed:,.0f} cross-node calls/s with nested refs)")
    print(f"object entries from the first sample to the last: here {growth['here']:+d}, far {growth['far']:+d}; "
          f"raylet RSS {rss_growth} MiB")
    print(f"after the last round: here {end['here']}, far {end['far']} (before the first: here {base['here']}, "
          f"far {base['far']})")
    print("values: " + ("all correct" if got_sum == expect_sum else f"WRONG: {got_sum} != {expect_sum}"))
    print("verdict: " + ("flat, nothing left behind" if ok else "LEAK or loss"))
    phalanx.shutdown()
    out = {"rounds": args.rounds, "seconds": elapsed, "rounds_per_s": args.rounds / elapsed, "base": base,
           "samples": samples, "end": end, "ok": ok}
    if args.peer == "ray":
        rate, right = ray_rate(args.peer_rounds, args.window)
        out["ray_rounds_per_s"] = rate
        print(f"Ray, {args.peer_rounds} rounds: {rate:,.0f} rounds/s{'' if right else ' (WRONG values)'}; "
              f"phalanx/Ray: {args.rounds / elapsed / rate:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
