"""One microbenchmark row, this build against another, alternated in one shell.

    .venv/bin/python bench/row_ab.py generator --base-site /tmp/base_site --pairs 4
    .venv/bin/python bench/row_ab.py tasks-sync --base-site /tmp/base_site --pairs 3
    .venv/bin/python bench/row_ab.py multinode-tasks --base-site /tmp/base_site --pairs 3

A row of bench/microbenchmark.py that an A/B of the whole suite (bench/ab_microbenchmark.py) puts
below its spread is timed alone: each run is a fresh cluster (phalanx.init as the microbenchmark
does), a warm-up, then the median of five 2-second windows; the pairs alternate this build (the
venv's) and the base (PYTHONPATH=BASE_SITE). Prints each run and the ratio of the medians of the
runs (above 1: this build is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DEFAULT_INIT = 'resources={"custom": 100}'
ROWS = {
    # name: (what one call does, units per call[, phalanx.init's arguments])
    "generator": ("[phalanx.get(r) for r in gen.remote(1000)]", 1000),
    "tasks-sync": ("phalanx.get(noop.remote())", 1),
    "tasks-async": ("phalanx.get([noop.remote() for _ in range(1000)])", 1000),
    "put-calls": ("phalanx.put(0)", 1),
    "get-calls": ("phalanx.get(SMALL)", 1),
    "actor-calls-sync": ("phalanx.get(pinger.ping.remote())", 1),
    "actor-calls-async": ("phalanx.get([pinger.ping.remote() for _ in range(1000)])", 1000),
    "actor-calls-args": ("phalanx.get([pinger.echo.remote(ARG) for _ in range(1000)])", 1000),
    "async-actor-calls": ("phalanx.get([async_pinger.ping.remote() for _ in range(1000)])", 1000),
    "multinode-tasks": ("phalanx.get([spread.remote() for _ in range(1000)])", 1000, "num_nodes=3, num_cpus=1"),
}

CHILD = """
import json, statistics, time
import phalanx

def _yield_ints(n):
    for i in range(n):
        yield i

class _Pinger:
    def ping(self):
        return None

    def echo(self, x):
        return x

class _AsyncPinger:
    async def ping(self):
        return None

ARG = b"x" * 1024
phalanx.init({init})
gen = phalanx.remote(num_returns="streaming")(_yield_ints)
SMALL = phalanx.put(0)

@phalanx.remote
def noop():
    return None

@phalanx.remote(scheduling_strategy="SPREAD")
def spread():
    return None

if "pinger." in {call!r}.replace("async_pinger.", ""):
    pinger = phalanx.remote(_Pinger).remote()
    phalanx.get(pinger.ping.remote())
if "[async_pinger." in {call!r}:
    async_pinger = phalanx.remote(_AsyncPinger).remote()
    phalanx.get(async_pinger.ping.remote())

for _ in range(3):
    {call}
rates = []
for _ in range(5):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        {call}
        n += {units}
    rates.append(n / (time.perf_counter() - t0))
print(json.dumps(statistics.median(rates)))
phalanx.shutdown()
"""


def run(row, site):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if site:
        env["PYTHONPATH"] = site
    call, units, init = (ROWS[row] + (DEFAULT_INIT,))[:3]
    out = subprocess.run([sys.executable, "-c", CHILD.format(call=call, units=units, init=init)], env=env, check=True,
                         cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=300)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("row", choices=sorted(ROWS))
    ap.add_argument("--base-site", required=True, help="the base build, installed with pip --target")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    this, base = [], []
    for i in range(args.pairs):
        this.append(run(args.row, None))
        base.append(run(args.row, args.base_site))
        print(f"pair {i + 1}: this {this[-1]:,.0f}/s, base {base[-1]:,.0f}/s", flush=True)
    ratio = statistics.median(this) / statistics.median(base)
    print(f"{args.row}: this {statistics.median(this):,.0f}/s, base {statistics.median(base):,.0f}/s, ratio {ratio:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"row": args.row, "this": this, "base": base, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
