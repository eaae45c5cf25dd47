"""examples/train/data_parallel.py's step time under each configuration, in
one run on one cluster: fusion on and off, compression off, fp16, TopK and
1-bit (each as the cost model chose, and always on), and the same program
on Ray; the first configuration also trains to --target. Rank r runs on
node r; with --netns node k is namespace pnodeK behind a RATE link
(run_data_parallel.sh sets them up), without it every node is on loopback.

    bash bench/train/run_data_parallel.sh                       # 4 namespaces, 1gbit
    .venv/bin/python bench/train/data_parallel_bench.py --nodes 4 --seconds 15   # loopback

Prints each run's progress and a table; --json writes the figures."""
import argparse
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "examples", "train"), os.path.join(ROOT, "bench", "collectives")]

import async_sgd  # noqa: E402  (workers get these by value: they cannot import the examples)
import clusters  # noqa: E402
import data_parallel  # noqa: E402

CONFIGS = ("none/fused,none/unfused,fp16/model,topk/model,onebit/model,fp16/always,topk/always,onebit/always,"
           "fp16/unfused-model,"
           "ray/fused")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--configs", default=CONFIGS, help="codec/how: how is fused, unfused, model (fused, the cost "
                    "model per bucket), always (fused, always compressed) or unfused-model (the cost model per tensor)")
    ap.add_argument("--seconds", type=float, default=20.0, help="per configuration")
    ap.add_argument("--target", type=float, default=0.82, help="the first configuration trains to it")
    ap.add_argument("--target-seconds", type=float, default=180.0)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--netns", action="store_true", help="node k is namespace pnodeK (run_data_parallel.sh)")
    ap.add_argument("--rate", default="", help="the links' rate, for the table (e.g. 1gbit)")
    ap.add_argument("--json", help="write the figures here")
    b = ap.parse_args()
    results = []
    configs = b.configs.split(",")
    for i, config in enumerate(configs):
        codec, how = config.split("/")
        a = data_parallel.parser().parse_args([])
        a.ranks, a.layers, a.hidden, a.every = b.nodes, b.layers, b.hidden, 10
        a.compression = "none" if codec == "ray" else codec
        a.fusion_mib = 0.0 if how.startswith("unfused") else 64.0
        a.no_cost_model = how == "always"
        a.target, a.seconds = (b.target, b.target_seconds) if i == 0 else (2.0, b.seconds)
        system = "ray" if codec == "ray" else "phalanx"
        if system == "ray" and importlib.util.find_spec("ray") is None:  # (not `import ray`: see clusters)
            print("ray/fused skipped: Ray is not installed (scripts/bench.sh installs it)", flush=True)
            continue
        with clusters.cluster(system, b.nodes, netns=b.netns, by_value=[async_sgd, data_parallel]) as rt:
            r = data_parallel.train(rt, a, place=lambda k: f"n{k}")
        r["config"] = config
        results.append(r)
    where = f"{b.nodes} namespaces, {b.rate or 'unshaped'} links" if b.netns else f"{b.nodes} nodes on loopback"
    r0 = results[0]
    print(f"\n{where}; {b.nodes} ranks; model {r0['parameters']:,} parameters in {r0['tensors']} tensors "
          f"({r0['parameters'] * 4 / 2**20:.1f} MiB of gradients per step)")
    if r0["time_to_target_s"]:
        print(f"{r0['config']}: test accuracy {r0['target']} in {r0['time_to_target_s']:.1f} s ({r0['steps']} steps)")
    print("| configuration | collectives / step | step (ms) | waiting for gradients (ms) | bytes sent / step (rank 0) "
          "| the cost model chose | accuracy at the end |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        chose = {}
        for c in r["choices"]:
            chose[c["codec"]] = chose.get(c["codec"], 0) + 1
        chose = ", ".join(f"{k} x{v}" for k, v in sorted(chose.items())) or "-"
        per_step = r["bytes_sent_rank0"] / max(1, r["steps"])
        print(f"| {r['config']} | {r['collectives_per_step']} | {r['step_ms']:.1f} | {r['wait_ms']:.1f} | "
              f"{per_step / 2**20:.2f} MiB | {chose} | {r['accuracy']:.3f} |")
    if b.json:
        with open(b.json, "w") as f:
            json.dump({"nodes": b.nodes, "rate": b.rate, "netns": b.netns, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
