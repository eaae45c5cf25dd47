"""examples/train/async_sgd.py on an emulated cluster, in one run: phalanx
with collective.reduce, phalanx gathering the gradients in the server
(--naive), and Ray (the naive program: Ray has no reduce), each on the same
nodes. The server runs on node 0, one worker on each other node; with
--netns node k is namespace pnodeK behind a RATE link (run_netns.sh sets
them up), without it every node is on loopback.

    bash bench/train/run_netns.sh                      # 4 nodes, 1gbit, a 4.3 MiB model, 60 s each
    .venv/bin/python bench/train/async_sgd_netns.py --nodes 3 --seconds 20   # loopback

Prints each run's progress and a table; --json writes the figures."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "examples", "train"), os.path.join(ROOT, "bench", "collectives")]

import async_sgd  # noqa: E402  (workers get its classes by value: they cannot import the example)
import clusters  # noqa: E402


def main():
    ap = async_sgd.parser()
    ap.set_defaults(nodes=4, workers=0, hidden=4096, seconds=60.0, target=2.0, every=10.0)
    ap.add_argument("--runs", default="reduce,naive,ray", help="which of reduce, naive, ray, in this order")
    ap.add_argument("--netns", action="store_true", help="node k is namespace pnodeK (run_netns.sh)")
    ap.add_argument("--rate", default="", help="the links' rate, for the table (e.g. 1gbit)")
    a = ap.parse_args()
    a.workers = a.workers or a.nodes - 1
    k = a.k or max(1, a.workers // 2)
    results = []
    for run in a.runs.split(","):
        if run not in ("reduce", "naive", "ray"):
            ap.error(f"unknown run {run!r} (reduce, naive, ray)")
        system = "ray" if run == "ray" else "phalanx"
        with clusters.cluster(system, a.nodes, netns=a.netns, by_value=[async_sgd]):
            runtime = async_sgd.Ray if run == "ray" else async_sgd.Phalanx
            rt = runtime(a.nodes, run != "reduce", connect=False, place=lambda n: f"n{n}")
            results.append(async_sgd.train(rt, a, k, first_worker=1))
    params = async_sgd.MLP(256, a.hidden, 20).size
    where = f"{a.nodes} namespaces, {a.rate or 'unshaped'} links" if a.netns else f"{a.nodes} nodes on loopback"
    print(f"\n{where}; {a.workers} workers, k = {k}; model {params:,} parameters ({params * 4 / 2**20:.1f} MiB)")
    print(f"| system | gradients | updates/s | samples/s | test accuracy | time to {a.target:g} | "
          "gradients / step / publish |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        ttt = f"{r['time_to_target_s']:.1f} s" if r.get("time_to_target_s") else "not reached"
        print(f"| {r['system']} | {r['way']} | {r['updates_per_s']:.1f} | {r['samples_per_s']:,.0f} | "
              f"{r['accuracy']:.3f} | {ttt} | {100 * r['gradients_share']:.0f}% / {100 * r['step_share']:.0f}% / "
              f"{100 * r['publish_share']:.0f}% |")
    if len(results) > 1:
        base = results[-1]["updates_per_s"]
        print("; ".join(f"{r['system']} {r['way']}: {r['updates_per_s'] / base:.2f}x {results[-1]['system']}"
                        for r in results[:-1]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nodes": a.nodes, "rate": a.rate, "netns": a.netns, "workers": a.workers, "k": k,
                       "parameters": params, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
