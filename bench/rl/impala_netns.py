"""examples/rl/impala.py on an emulated cluster, in one run: phalanx, then
Ray, on the same nodes. The learner runs on node 0, one simulator on each
other node; with --netns node k is namespace pnodeK behind a RATE link
(run_netns.sh sets them up), without it every node is on loopback. The
policy is >= 4 MiB (--hidden 1024), so each new version is megabytes to
deliver to every simulator node: the object layer's broadcast against
Ray's transfers.

    bash bench/rl/run_netns.sh                        # 8 nodes, 1gbit, 60 s each
    .venv/bin/python bench/rl/impala_netns.py --nodes 3 --seconds 20   # loopback

Prints each run's progress and a table; --json writes the figures."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "examples", "rl"), os.path.join(ROOT, "bench", "collectives")]

import clusters  # noqa: E402
import impala  # noqa: E402  (workers get its classes by value: they cannot import the example)


def main():
    ap = impala.parser()
    ap.set_defaults(nodes=8, simulators=0, seconds=60.0, every=10.0, target=1e9, png="")
    ap.add_argument("--runs", default="phalanx,ray", help="which of phalanx, ray, in this order")
    ap.add_argument("--netns", action="store_true", help="node k is namespace pnodeK (run_netns.sh)")
    ap.add_argument("--rate", default="", help="the links' rate, for the table (e.g. 1gbit)")
    a = ap.parse_args()
    a.simulators = a.simulators or a.nodes - 1
    results = []
    for run in a.runs.split(","):
        if run not in ("phalanx", "ray"):
            ap.error(f"unknown run {run!r} (phalanx, ray)")
        with clusters.cluster(run, a.nodes, netns=a.netns, by_value=[impala]):
            rt = (impala.Ray if run == "ray" else impala.Phalanx)(a.nodes, connect=False, place=lambda n: f"n{n}")
            results.append(impala.train(rt, a, first_sim=1))
    where = f"{a.nodes} namespaces, {a.rate or 'unshaped'} links" if a.netns else f"{a.nodes} nodes on loopback"
    r0 = results[0]
    print(f"\n{where}; IMPALA on {a.env}, learner on node 0, {a.simulators} simulators x {a.envs} environments; "
          f"policy {r0['parameters']:,} parameters ({r0['policy_mib']:.1f} MiB)")
    impala.print_table(results)
    if len(results) > 1:
        base = results[-1]
        print(f"{results[0]['system']} / {base['system']}: env steps/s {results[0]['env_steps_per_s'] / base['env_steps_per_s']:.2f}x, "
              f"policy delivery {base['policy_delivery_s'] / max(1e-9, results[0]['policy_delivery_s']):.2f}x faster")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nodes": a.nodes, "rate": a.rate, "netns": a.netns, "args": vars(a), "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
