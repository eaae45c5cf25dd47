"""Ray's tests (tests/python/ray_suite) on Ray and on phalanx, side by side.

    .venv/bin/python bench/ray_suite.py [--only phalanx|ray] [--json OUT] [-- PYTEST_ARGS...]

Runs the suite once per target (RAY_SUITE_TARGET=ray needs Ray installed: `pip install ray`), then
prints each target's score, phalanx's score over the tests that pass on Ray (the contract: at least
95%), and every test whose outcome differs. The suite is written for both: tests import `ray` only."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "tests", "python", "ray_suite")


def run(target, extra):
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "junit.xml")
        env = dict(os.environ, RAY_SUITE_TARGET=target)
        start = time.monotonic()
        paths = [] if any(a.startswith("tests/") or a.endswith(".py") for a in extra) else [SUITE]
        cmd = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", "--timeout", "120",
               f"--junitxml={xml}", *extra]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        elapsed = time.monotonic() - start
        if not os.path.exists(xml):
            sys.exit(f"pytest on {target} wrote no report:\n{proc.stdout[-4000:]}")
        outcomes = {}
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = f"{case.get('classname').split('.')[-1]}::{case.get('name')}"
            kinds = {child.tag: child for child in case}
            if "failure" in kinds or "error" in kinds:
                node = kinds.get("failure", kinds.get("error"))
                outcomes[name] = ("failed", (node.get("message") or "").splitlines()[0][:160] if node is not None else "")
            elif "skipped" in kinds:
                outcomes[name] = ("skipped", (kinds["skipped"].get("message") or "")[:160])
            else:
                outcomes[name] = ("passed", "")
        return outcomes, elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("phalanx", "ray"))
    parser.add_argument("--json", help="write both targets' outcomes here")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    targets = [args.only] if args.only else ["ray", "phalanx"]
    results = {}
    for target in targets:
        outcomes, elapsed = run(target, args.pytest_args)
        results[target] = {"outcomes": outcomes, "seconds": round(elapsed, 1)}
        passed = sum(1 for o, _ in outcomes.values() if o == "passed")
        print(f"{target:8s} {passed}/{len(outcomes)} passed in {elapsed:.0f} s")
    if len(targets) == 2:
        ray_out, phx_out = results["ray"]["outcomes"], results["phalanx"]["outcomes"]
        on_ray = [t for t, (o, _) in ray_out.items() if o == "passed"]
        both = [t for t in on_ray if phx_out.get(t, ("missing",))[0] == "passed"]
        share = 100.0 * len(both) / max(1, len(on_ray))
        print(f"phalanx passes {len(both)} of the {len(on_ray)} tests that pass on Ray: {share:.1f}% (target 95%)")
        for test in sorted(set(ray_out) | set(phx_out)):
            r, p = ray_out.get(test, ("missing", "")), phx_out.get(test, ("missing", ""))
            if r[0] != p[0]:
                print(f"  {test}: ray {r[0]}, phalanx {p[0]}  {p[1] or r[1]}")
        results["share_of_ray_passing"] = round(share, 1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
