"""What the timeline's event rings cost the microbenchmark's rows
(docs/observability.md): the latency-bound ones (one synchronous task,
actor call or actor call through the raylet at a time) and the main
throughput ones, with tracing on and off (PHALANX_TRACE=0), alternated in
fresh clusters on one machine.

    .venv/bin/python bench/trace_overhead.py --rounds 8 --json docs/results/trace_overhead.json
    .venv/bin/python bench/trace_overhead.py --pin 0     # every process on CPU 0
    .venv/bin/python bench/trace_overhead.py --rows "single client put calls"

Why not bench/ab_microbenchmark.py: on a small machine the latency rows
are bimodal (about 12k or 16k calls/s a run, in either build), set by where
the scheduler puts the caller, the raylet and the worker, so a median of a
few whole runs moves by 15% either way. Here each run is short and
measures many windows, the order of on and off alternates each round, and
the report gives, for each row, the median and the 90th percentile of all
windows of each setting (the 90th: the fast mode, where a cost shows most)
and their ratios. --pin runs every process of both settings on the given
CPUs (sched_setaffinity, inherited by the raylet and its workers), which
takes the placement out of the noise.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from phalanx.microbenchmark import window_rates  # noqa: E402

ROWS = ("single client tasks sync", "1:1 actor calls sync", "1:1 actor calls sync through the raylet",
        "single client tasks async", "single client put calls", "single client get calls", "1:1 actor calls async")


def windows(fn, seconds, n, per_call=1):
    """Units per second in each of `n` windows of `seconds`, after 0.3 s of warm-up."""
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        fn()
    return window_rates(fn, per_call, seconds, n)


class Pinger:
    def ping(self):
        return None


def child(row, seconds, n):
    if row.endswith("through the raylet"):
        os.environ["PHALANX_DIRECT_ACTOR_CALLS"] = "0"
    import phalanx
    phalanx.init(num_cpus=os.cpu_count())
    try:
        get = phalanx.get
        if row.startswith("single client tasks"):
            @phalanx.remote
            def noop():
                return None
            if row.endswith("async"):
                return windows(lambda: get([noop.remote() for _ in range(1000)]), seconds, n, 1000)
            return windows(lambda: get(noop.remote()), seconds, n)
        if row == "single client put calls":
            return windows(lambda: phalanx.put(0), seconds, n)
        if row == "single client get calls":
            ref = phalanx.put(0)
            return windows(lambda: get(ref), seconds, n)
        a = phalanx.remote(Pinger).remote()
        if row.endswith("async"):
            return windows(lambda: get([a.ping.remote() for _ in range(1000)]), seconds, n, 1000)
        return windows(lambda: get(a.ping.remote()), seconds, n)
    finally:
        phalanx.shutdown()


def run(row, trace_on, seconds, n, pin):
    env = dict(os.environ)
    env["PHALANX_TRACE"] = "1" if trace_on else "0"
    cmd = [sys.executable, __file__, "--child", row, "--seconds", str(seconds), "--windows", str(n)]
    pre = None
    if pin:
        cpus = {int(c) for c in pin.split(",")}
        pre = lambda: os.sched_setaffinity(0, cpus)  # noqa: E731 - inherited by the raylet and its workers
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, preexec_fn=pre, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6, help="on/off pairs per row")
    ap.add_argument("--seconds", type=float, default=0.5, help="one window")
    ap.add_argument("--windows", type=int, default=8, help="windows per run")
    ap.add_argument("--pin", help="CPUs for every process, e.g. 0 or 0,1 (default: the scheduler decides)")
    ap.add_argument("--rows", default=",".join(ROWS),
                    help="comma-separated rows")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.seconds, a.windows)))
        return 0
    rows = [r.strip() for r in a.rows.split(",") if r.strip()]
    results = {}
    for row in rows:
        on, off = [], []
        for k in range(a.rounds):
            order = (True, False) if k % 2 == 0 else (False, True)
            for setting in order:
                (on if setting else off).extend(run(row, setting, a.seconds, a.windows, a.pin))
            print(f"{row}: round {k + 1}/{a.rounds}", file=sys.stderr, flush=True)
        results[row] = {"on": on, "off": off}
    print(f"Tracing on against off (PHALANX_TRACE=0), {a.rounds} alternated pairs of runs, "
          f"{a.windows} windows of {a.seconds} s each{', pinned to CPU ' + a.pin if a.pin else ''}:\n")
    print("| row | on: median / p90 | off: median / p90 | ratio of medians | ratio of p90 |")
    print("|---|---|---|---|---|")
    table = []
    for row, r in results.items():
        m_on, m_off = statistics.median(r["on"]), statistics.median(r["off"])
        p_on, p_off = pct(r["on"], 0.9), pct(r["off"], 0.9)
        table.append({"row": row, "median_on": m_on, "median_off": m_off, "p90_on": p_on, "p90_off": p_off,
                      "ratio_median": m_on / m_off, "ratio_p90": p_on / p_off})
        print(f"| {row} | {m_on:,.0f} / {p_on:,.0f} | {m_off:,.0f} / {p_off:,.0f} | {m_on / m_off:.3f} | "
              f"{p_on / p_off:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rounds": a.rounds, "seconds": a.seconds, "windows": a.windows, "pin": a.pin,
                       "rows": table, "samples": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
