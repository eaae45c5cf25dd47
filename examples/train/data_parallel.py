"""Synchronous data-parallel training, Horovod style, with
phalanx.torch.DistributedOptimizer: every rank (an actor, one per node)
computes gradients on its shard, the optimizer averages them over the
group in fused buckets while backward runs, optionally compressed where the
cost model says it pays, and every rank takes the same step.

    .venv/bin/python examples/train/data_parallel.py                       # 2 ranks on 2 raylets
    .venv/bin/python examples/train/data_parallel.py --ranks 4 --compression fp16
    .venv/bin/python examples/train/data_parallel.py --fusion-mib 0         # one collective per tensor
    .venv/bin/python examples/train/data_parallel.py --ray                  # the same program on Ray
    bash bench/train/run_data_parallel.sh                                   # 4 emulated nodes, 1 Gbit/s

The model is deliberately made of many small tensors (a deep MLP with a
LayerNorm per layer: `--layers` x 4 tensors), the case tensor fusion is for;
the task is the generated 20-class problem of examples/train/async_sgd.py
(the best classifier is right 88% of the time). Rank 0 reports test
accuracy each interval; the run stops at --target or after --seconds.
On Ray (no allreduce for CPU tensors without extra packages) each rank
puts its flattened gradient and gets every other rank's: what a Ray
program does by hand.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from async_sgd import make_data  # noqa: E402  (the same generated task)

DIM, CLASSES = 256, 20


def make_model(layers, hidden):
    import torch
    mods, width = [], DIM
    for _ in range(layers):
        mods += [torch.nn.Linear(width, hidden), torch.nn.LayerNorm(hidden), torch.nn.ReLU()]
        width = hidden
    mods.append(torch.nn.Linear(width, CLASSES))
    return torch.nn.Sequential(*mods)


class Rank:
    """One rank: its shard, the model, and the optimizer over the group."""

    def __init__(self, system, world, rank, group, layers, hidden, lr, batch, compression, fusion, cost_model,
                 seed, board=None):
        import torch
        torch.set_num_threads(1)
        torch.manual_seed(seed * 1000 + rank)  # a different start on every rank: broadcast_parameters mends it
        self.system, self.world, self.rank, self.batch = system, world, rank, batch
        self.x, self.y = (torch.from_numpy(v) for v in make_data(20000, DIM, CLASSES, seed * 1000 + rank))
        self.gen = torch.Generator().manual_seed(seed * 1000 + rank)
        self.model = make_model(layers, hidden)
        inner = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.board, self.round = board, 0
        if system == "phalanx":
            import phalanx
            import phalanx.torch as pt
            phalanx.collective.init_group(world, rank, group, timeout=120)
            pt.broadcast_parameters(self.model.state_dict(), root_rank=0, group_name=group)
            self.opt = pt.DistributedOptimizer(inner, named_parameters=self.model.named_parameters(),
                                               group_name=group, compression=compression,
                                               fusion_threshold=fusion, cost_model=cost_model)
        else:
            self.opt = inner
            self._ray_average(params=True)

    def _ray_average(self, params=False):
        """Ray: every rank's flattened gradients (or, once, rank 0's
        parameters) through the object store and a board actor."""
        import ray
        import torch
        tensors = list(self.model.parameters())
        flat = (torch.nn.utils.parameters_to_vector(tensors) if params else
                torch.cat([p.grad.reshape(-1) for p in tensors])).detach().numpy()
        self.round += 1
        mine = [ray.put(flat)] if (not params or self.rank == 0) else []
        refs = ray.get(self.board.exchange.remote(self.round, self.rank, mine, self.world))
        if params:
            torch.nn.utils.vector_to_parameters(torch.from_numpy(ray.get(refs[0]).copy()), tensors)
            return
        total = np.sum(ray.get(refs), axis=0) / self.world
        i = 0
        for p in tensors:
            p.grad.copy_(torch.from_numpy(total[i:i + p.numel()]).view(p.shape))
            i += p.numel()

    def steps(self, n):
        """n training steps: (mean loss, seconds per step, seconds waiting for the gradients per step)."""
        import torch
        loss_sum, t0 = 0.0, time.perf_counter()
        wait0 = self.opt.stats["wait_s"] if self.system == "phalanx" else 0.0
        wait = 0.0
        for _ in range(n):
            i = torch.randint(0, len(self.y), (self.batch,), generator=self.gen)
            self.opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(self.model(self.x[i]), self.y[i])
            loss.backward()
            if self.system != "phalanx":
                w = time.perf_counter()
                self._ray_average()
                wait += time.perf_counter() - w
            self.opt.step()
            loss_sum += float(loss)
        if self.system == "phalanx":
            wait = self.opt.stats["wait_s"] - wait0
        elapsed = time.perf_counter() - t0
        return loss_sum / n, elapsed / n, wait / n

    def accuracy(self, n=4000):
        import torch
        x, y = make_data(n, DIM, CLASSES, seed=10_000)
        with torch.no_grad():
            return float((self.model(torch.from_numpy(x)).argmax(1) == torch.from_numpy(y)).float().mean())

    def describe(self):
        """(parameters, tensors, collectives per step, the cost model's choices, the link it measured, bytes sent)."""
        params = list(self.model.parameters())
        if self.system != "phalanx":
            return sum(p.numel() for p in params), len(params), 1, [], {}, 0
        return (sum(p.numel() for p in params), len(params), len(self.opt.slots), self.opt.report(),
                getattr(self.opt, "link", {}), self.opt.stats["bytes_sent"])

    def params_digest(self):
        import torch
        return float(torch.nn.utils.parameters_to_vector(self.model.parameters()).double().sum())


class Board:
    """Ray only: the meeting point where ranks swap refs to their gradients."""

    def __init__(self):
        self.rounds = {}

    async def exchange(self, round_, rank, refs, world):
        import asyncio
        r = self.rounds.setdefault(round_, {"refs": {}, "done": asyncio.Event(), "left": world})
        if refs:
            r["refs"][rank] = refs[0]
        if len(r["refs"]) == (world if round_ > 1 else 1):  # (round 1: rank 0's parameters)
            r["done"].set()
        await r["done"].wait()
        r["left"] -= 1
        out = [r["refs"][k] for k in sorted(r["refs"])]
        if r["left"] == 0:
            del self.rounds[round_]
        return out


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=0, help="raylets in the embedded cluster (default: --ranks)")
    ap.add_argument("--layers", type=int, default=8, help="hidden layers (4 tensors each)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--compression", default="none", help="none, fp16, topk or onebit")
    ap.add_argument("--no-cost-model", action="store_true", help="compress every tensor, paying or not")
    ap.add_argument("--fusion-mib", type=float, default=64.0, help="fusion buffer (MiB; 0: no fusion)")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--target", type=float, default=0.85, help="stop once rank 0's test accuracy reaches it")
    ap.add_argument("--every", type=int, default=20, help="steps between progress lines")
    ap.add_argument("--ray", action="store_true", help="the same program on Ray")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--png", default="data_parallel_accuracy.png", help="the accuracy curve ('' for none)")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def train(rt, a, place=None, first_node=0):
    """Runs the ranks on runtime module `rt` (phalanx or ray); rank r on the
    node offering resource place(first_node + r) when `place` is given."""
    system = "ray" if rt.__name__ == "ray" else "phalanx"
    group = f"dp-{os.getpid()}-{time.monotonic_ns()}"
    opts = lambda r: {"resources": {place(first_node + r): 1}} if place else {}  # noqa: E731
    board = rt.remote(Board).options(num_cpus=0).remote() if system == "ray" else None
    cls = rt.remote(Rank)
    ranks = [cls.options(num_cpus=0, **opts(r)).remote(
        system, a.ranks, r, group, a.layers, a.hidden, a.lr, a.batch, a.compression,
        int(a.fusion_mib * 2**20), not a.no_cost_model, a.seed, board) for r in range(a.ranks)]
    n_params, n_tensors, collectives, choices, link, _ = rt.get(ranks[0].describe.remote(), timeout=300)
    chosen = {c["codec"] for c in choices}
    print(f"{system}: {a.ranks} ranks, model {n_params:,} parameters in {n_tensors} tensors, "
          f"{collectives} collectives per step (fusion {a.fusion_mib:g} MiB), compression {a.compression}"
          + (f" (cost model chose: {', '.join(sorted(chosen))})" if choices else ""), flush=True)
    if link:
        print(f"  link measured: latency {link['latency_ms']:.2f} ms, allgather {link['gather_latency_ms']:.2f} ms, "
              f"{link['bandwidth_MBps']:.0f} MB/s", flush=True)
    start, steps, curve, time_to_target = time.monotonic(), 0, [], None
    step_s, wait_s, acc = [], [], 0.0
    while True:
        out = rt.get([r.steps.remote(a.every) for r in ranks], timeout=600)
        steps += a.every
        loss = float(np.mean([o[0] for o in out]))
        step_s.append(max(o[1] for o in out))
        wait_s.append(max(o[2] for o in out))
        acc = rt.get(ranks[0].accuracy.remote(), timeout=120)
        elapsed = time.monotonic() - start
        curve.append((elapsed, acc))
        print(f"{elapsed:6.1f} s  step {steps:5d}  {steps / elapsed:6.1f} steps/s  {1000 * step_s[-1]:6.1f} ms/step "
              f"(waiting for gradients {1000 * wait_s[-1]:5.1f})  loss {loss:.3f}  test accuracy {acc:.3f}", flush=True)
        if acc >= a.target and time_to_target is None:
            time_to_target = elapsed
        if time_to_target is not None or elapsed > a.seconds:
            break
    digests = rt.get([r.params_digest.remote() for r in ranks], timeout=60)
    if len(set(digests)) != 1:
        raise RuntimeError(f"the ranks' parameters differ after training: {digests}")
    *_, sent = rt.get(ranks[0].describe.remote(), timeout=60)
    for r in ranks + ([board] if board else []):  # (their processes go: a benchmark runs many configurations)
        rt.kill(r)
    elapsed = time.monotonic() - start
    result = {"system": system, "ranks": a.ranks, "parameters": n_params, "tensors": n_tensors,
              "collectives_per_step": collectives, "fusion_mib": a.fusion_mib, "compression": a.compression,
              "cost_model": not a.no_cost_model, "choices": choices, "link": link, "steps": steps,
              "steps_per_s": steps / elapsed, "step_ms": 1000 * float(np.median(step_s)),
              "wait_ms": 1000 * float(np.median(wait_s)), "accuracy": acc, "target": a.target,
              "time_to_target_s": time_to_target, "seconds": elapsed, "bytes_sent_rank0": sent, "curve": curve}
    print(f"done ({system}): {steps} steps in {elapsed:.1f} s, {result['step_ms']:.1f} ms/step (median), test "
          f"accuracy {acc:.3f}" + (f", target {a.target} reached in {time_to_target:.1f} s" if time_to_target else
                                   f", target {a.target} not reached"), flush=True)
    return result


def write_png(path, results, target):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        t, v = zip(*r["curve"])
        ax.plot(t, v, lw=2, label=f"{r['system']} {r['compression']} ({r['step_ms']:.1f} ms/step)")
    ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:g}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("test accuracy (rank 0)")
    ax.set_title(f"data-parallel training, {results[0]['ranks']} ranks")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    if a.compression not in ("none", "fp16", "topk", "onebit"):
        ap.error(f"--compression must be none, fp16, topk or onebit, got {a.compression!r}")
    if a.ranks < 1 or a.every < 1 or a.fusion_mib < 0:
        ap.error("--ranks and --every must be at least 1, --fusion-mib at least 0")
    nodes = a.nodes or a.ranks
    import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    import async_sgd
    cloudpickle.register_pickle_by_value(async_sgd)
    if a.ray:
        import ray
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        ray.cloudpickle.register_pickle_by_value(async_sgd)
        ray.init(num_cpus=2 * nodes, include_dashboard=False, log_to_driver=False)
        rt, place = ray, None
    else:
        import phalanx
        phalanx.init(num_nodes=nodes, num_cpus=2)
        rt, place = phalanx, ((lambda k: f"node:{k % nodes}") if nodes > 1 else None)
    try:
        result = train(rt, a, place)
    finally:
        rt.shutdown()
    if a.png:
        write_png(a.png, [result], a.target)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": [result]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
