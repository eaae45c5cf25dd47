"""What one dashboard snapshot costs on a busy cluster (docs/observability.md,
"What it costs"): the rings filled by a workload of small tasks, then the
snapshot the page asks for every two seconds (--interval), read afresh (the whole
window from every ring, as `phalanx.dashboard.data.snapshot()` does) and
with the records kept between snapshots (data.Rings: only what ended since
the last answer is asked for, as the server does). Between two kept
snapshots the cluster runs --between more tasks, as it would between two
of the page's asks.

    .venv/bin/python bench/dashboard_snapshot.py [--tasks 100000] [--between 2000] [--old FILE]

--old FILE: also time another build's data.py (for example
`git show REV:python/phalanx/dashboard/data.py > /tmp/old_data.py`).
"""
import argparse
import importlib.util
import statistics
import time

import phalanx
from phalanx.dashboard import data


@phalanx.remote
def _noop():
    return None


def _run(n):
    for k in range(0, n, 1000):
        phalanx.get([_noop.remote() for _ in range(min(1000, n - k))])


def _timed(fn, reps, between, interval):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        _run(between)
        time.sleep(max(0.0, interval - (time.perf_counter() - t)))
        t = time.perf_counter()
        snap = fn()
        times.append(time.perf_counter() - t)
    return times, snap


def _runs(snap):
    return sum(t["finished"] for t in snap["tasks"] if t["name"].endswith("_noop"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000, help="tasks run first, to fill the rings")
    ap.add_argument("--between", type=int, default=2_000, help="tasks run before each timed snapshot")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--interval", type=float, default=2.0, help="seconds from one snapshot to the next (the page's)")
    ap.add_argument("--old", help="another data.py to time the same way (read afresh)")
    a = ap.parse_args()
    phalanx.init(num_cpus=2)
    try:
        t = time.perf_counter()
        _run(a.tasks)
        print(f"{a.tasks:,} tasks in {time.perf_counter() - t:.1f} s (the rings are full)")
        afresh = {"rings": None}

        def read_afresh():
            afresh["rings"] = data.Rings()
            return data.snapshot(rings=afresh["rings"])

        fns = [("read afresh", read_afresh, afresh)]
        if a.old:
            spec = importlib.util.spec_from_file_location("old_data", a.old)
            old = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(old)
            fns.append((f"read afresh, {a.old}", old.snapshot, None))
        kept = {"rings": data.Rings()}
        data.snapshot(rings=kept["rings"])  # (the page's first ask reads the whole window)
        fns.append(("records kept (the server)", lambda: data.snapshot(rings=kept["rings"]), kept))
        print("| snapshot | median ms | min ms | max ms | records received, MiB | _noop runs shown |")
        print("|---|---|---|---|---|---|")
        for name, fn, rings in fns:
            times, snap = _timed(fn, a.reps, a.between, a.interval)
            got = f"{rings['rings'].received / 2**20:.2f}" if rings else ""
            print(f"| {name} | {statistics.median(times) * 1e3:,.1f} | {min(times) * 1e3:,.1f} | "
                  f"{max(times) * 1e3:,.1f} | {got} | {_runs(snap):,} |")
        print(f"(kept: each ask reached back {kept['rings'].asked_s:.1f} s)")
    finally:
        phalanx.shutdown()


if __name__ == "__main__":
    main()
