"""The microbenchmark of two builds, alternated on one machine: this one
(the venv's) and one installed elsewhere with `pip install --target DIR`.
Timings here are noisy; alternating pairs and taking the median ratio per
row is how docs/benchmarks.md compares a change with the build before it.

    git clone . /tmp/base && git -C /tmp/base checkout OLD
    (cd /tmp/base && .venv/bin/python -m pip install --no-build-isolation --target /tmp/base_site .)
    .venv/bin/python bench/ab_microbenchmark.py --base-site /tmp/base_site --pairs 3 --json docs/results/ab.json

The same build with and without a setting: leave out --base-site and give
--base-env (the timeline's cost: --base-env PHALANX_TRACE=0, tracing off
in the base runs; docs/observability.md).

Prints a Markdown table: each row's figures for both builds and the median
of this build's over the base's (above 1: this build is faster; for rows
in ms, the inverse, so above 1 is still better).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MICROBENCHMARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "microbenchmark.py")


def run_once(site, extra, env_extra=()):
    """One microbenchmark run (--peers none): {metric: value}."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if site:
        env["PYTHONPATH"] = site
    for kv in env_extra:
        k, _, v = kv.partition("=")
        env[k] = v
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        subprocess.run([sys.executable, MICROBENCHMARK, "--peers", "none", "--json", out] + extra,
                       env=env, check=True, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL)
        with open(out) as f:
            data = json.load(f)
    finally:
        os.unlink(out)
    return flatten(data)


def flatten(data):
    """The phalanx figures of a microbenchmark JSON ({"results": {"phalanx": {metric: value}}})."""
    return {k: v for k, v in data["results"]["phalanx"].items() if isinstance(v, (int, float))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-site", help="the base build, installed with pip --target (default: this build)")
    ap.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment setting of the base runs only (repeatable)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--base-first", action="store_true", help="each pair starts with the base build")
    ap.add_argument("--json")
    ap.add_argument("extra", nargs="*", help="arguments for bench/microbenchmark.py (after --)")
    a = ap.parse_args()
    if not a.base_site and not a.base_env:
        ap.error("give --base-site, --base-env or both")
    this, base = [], []
    for k in range(a.pairs):
        order = (("this", None, this, ()), ("base", a.base_site, base, a.base_env))
        for name, site, runs, env in (order[::-1] if a.base_first else order):
            runs.append(run_once(site, a.extra, env))
            print(f"pair {k + 1}/{a.pairs}: {name} done", file=sys.stderr, flush=True)
    metrics = [m for m in this[0] if all(m in r for r in this + base)]
    print("| row | this build | base | median ratio |")
    print("|---|---|---|---|")
    table = []
    for m in metrics:
        t = [r[m] for r in this]
        b = [r[m] for r in base]
        ratio = statistics.median(t) / statistics.median(b) if statistics.median(b) else float("nan")
        if "(ms)" in m or m.endswith("_ms"):
            ratio = 1 / ratio if ratio else float("nan")
        table.append({"metric": m, "this": t, "base": b, "ratio": ratio})

        def fmt(xs):
            return " / ".join(f"{x:,.3f}" if x < 100 else f"{x:,.0f}" for x in xs)
        print(f"| {m} | {fmt(t)} | {fmt(b)} | {ratio:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"this": this, "base": base, "rows": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
