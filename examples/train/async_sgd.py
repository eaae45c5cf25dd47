"""Asynchronous SGD with a parameter server, the gradients summed by the
object layer: the workload of Hoplite's async SGD benchmark.

    .venv/bin/python examples/train/async_sgd.py                  # 2 raylets, 4 workers, k = 2
    .venv/bin/python examples/train/async_sgd.py --naive          # the server gets every gradient itself
    .venv/bin/python examples/train/async_sgd.py --system ray     # the same program on Ray (pip install ray)
    .venv/bin/python examples/train/async_sgd.py --hidden 4096 --seconds 120   # a 4.3 MB model

Workers (actors spread over the raylets of an embedded cluster) each hold
a shard of a classification dataset (generated: 20 classes of Gaussian
clusters in 256 dimensions, noisy enough that the best classifier is right
88% of the time) and compute the
gradient of a two-layer MLP on a minibatch with the parameters they were
given. The server:

  - sums the first k gradients to arrive: `phalanx.collective.reduce(
    in_flight, num_objects=k)` (the raylets add them up as they land,
    chained over the workers' nodes when that is faster), then
    `reduced_inputs` says whose went in;
  - takes an SGD step with momentum and publishes the new parameters with
    one `put`; only the k workers whose gradients went in read them (each
    raylet copies them once), the others keep working on what they have.

`--naive` waits for k gradients and gets each into the server, summing them
there (what a program on Ray does: Ray has no reduce); `--system ray` runs
that on Ray. Every interval prints updates/s, samples/s, the training loss
and test accuracy, and where the server's time went (waiting for and
summing gradients, the step, publishing); the run ends at --target
accuracy or after --seconds.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

STATS = 2  # trailing slots of a gradient: loss summed over the batch, batch size


def make_data(n, dim, classes, seed, signal=0.2):
    """n samples of `classes` Gaussian clusters in `dim` dimensions, unit
    noise around means of scale `signal`: the best possible classifier (the
    nearest mean) is right 88% of the time at 0.2. The means depend only on
    the dataset (seed 0), the samples on `seed`."""
    means = np.random.default_rng(0).normal(0, signal, (classes, dim)).astype(np.float32)
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = means[y] + rng.normal(0, 1, (n, dim)).astype(np.float32)
    return x.astype(np.float32), y


class MLP:
    """x (dim) -> relu hidden -> logits (classes), parameters in one float32 vector."""

    def __init__(self, dim, hidden, classes):
        self.shapes = [(hidden, dim), (hidden,), (classes, hidden), (classes,)]
        self.size = sum(int(np.prod(s)) for s in self.shapes)

    def unpack(self, flat):
        out, i = [], 0
        for s in self.shapes:
            n = int(np.prod(s))
            out.append(flat[i:i + n].reshape(s))
            i += n
        return out

    def init(self, rng):
        w1, b1, w2, b2 = (np.zeros(s, np.float32) for s in self.shapes)
        w1[:] = rng.normal(0, np.sqrt(2 / w1.shape[1]), w1.shape)
        w2[:] = rng.normal(0, np.sqrt(1 / w2.shape[1]), w2.shape)
        return np.concatenate([w1.ravel(), b1, w2.ravel(), b2]).astype(np.float32)

    def logits(self, flat, x):
        w1, b1, w2, b2 = self.unpack(flat)
        h = np.maximum(x @ w1.T + b1, 0)
        return h, h @ w2.T + b2

    def grad(self, flat, x, y):
        """(gradient of the summed cross-entropy, summed loss)."""
        w1, b1, w2, b2 = self.unpack(flat)
        h, z = self.logits(flat, x)
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.log(p[np.arange(len(y)), y] + 1e-12).sum()
        dz = p
        dz[np.arange(len(y)), y] -= 1.0
        dh = (dz @ w2) * (h > 0)
        return np.concatenate([(dh.T @ x).ravel(), dh.sum(0), (dz.T @ h).ravel(), dz.sum(0)]), loss

    def accuracy(self, flat, x, y):
        return float((self.logits(flat, x)[1].argmax(axis=1) == y).mean())


class Worker:
    """A shard of the data; gradients of minibatches with the parameters given."""

    def __init__(self, seed, n, dim, hidden, classes, batch):
        self.x, self.y = make_data(n, dim, classes, seed)
        self.model = MLP(dim, hidden, classes)
        self.rng = np.random.default_rng(seed)
        self.batch = batch

    def gradient(self, params):
        i = self.rng.integers(0, len(self.y), self.batch)
        g, loss = self.model.grad(params, self.x[i], self.y[i])
        return np.concatenate([g, [loss, self.batch]]).astype(np.float32)


class Phalanx:
    """The runtime calls the server makes, on phalanx. `connect=False`: a
    cluster this process is connected to already (bench/train: emulated
    nodes), whose node k offers the resource `place(k)`."""
    name = "phalanx"

    def __init__(self, nodes, naive, connect=True, place=lambda k: f"node:{k}"):
        import phalanx
        self.rt, self.naive, self.nodes, self.place = phalanx, naive, nodes, place
        if connect:
            phalanx.init(num_nodes=nodes, num_cpus=2)
        self.worker_class = phalanx.remote(Worker)

    def make_worker(self, i, *args):
        opts = {"resources": {self.place(i % self.nodes): 1}} if self.nodes > 1 else {}
        return self.worker_class.options(**opts).remote(*args)

    def sum_first(self, in_flight, k, timeout):
        """(sum of the first k gradients to arrive, the refs that went in)."""
        refs = list(in_flight)
        if self.naive:
            ready, _ = self.rt.wait(refs, num_returns=k, timeout=timeout)
            if len(ready) < k:
                raise TimeoutError(f"only {len(ready)} of {k} gradients within {timeout} s")
            return np.sum(self.rt.get(ready), axis=0), ready
        total = self.rt.collective.reduce(refs, op="sum", num_objects=k, timeout=timeout)
        return self.rt.get(total, timeout=timeout), self.rt.collective.reduced_inputs(total, timeout=timeout)


class Ray(Phalanx):
    """The same calls on Ray (a peer to measure against: `pip install ray`)."""
    name = "ray"

    def __init__(self, nodes, naive, connect=True, place=None):
        import ray
        self.rt, self.naive = ray, True  # (Ray has no reduce: the naive way)
        self.nodes, self.place = (1, None) if connect else (nodes, place)
        if connect:
            ray.init(num_cpus=2 * nodes, include_dashboard=False, log_to_driver=False)
        self.worker_class = ray.remote(Worker)


def main(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    k = a.k or max(1, a.workers // 2)
    if not 1 <= k <= a.workers:
        ap.error(f"--k must be between 1 and --workers ({a.workers})")
    rt = (Ray if a.system == "ray" or a.ray else Phalanx)(a.nodes, a.naive)
    try:
        result = train(rt, a, k)
    finally:
        rt.rt.shutdown()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "k": k, "results": [result]}, f, indent=1)
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        t, acc = zip(*result["curve"])
        ax.plot(t, acc, lw=2, label=f"{result['system']}, {result['way']} ({result['updates_per_s']:.1f} updates/s)")
        ax.axhline(a.target, color="gray", ls="--", lw=1, label=f"target {a.target:g}")
        ax.set_xlabel("seconds")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"asynchronous SGD, {a.workers} workers, k = {k}")
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(a.png, dpi=100)
        print(f"accuracy curve: {os.path.abspath(a.png)}")
    return 0


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["phalanx", "ray"], default="phalanx")
    ap.add_argument("--nodes", type=int, default=2, help="raylets in the embedded cluster (phalanx)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--k", type=int, default=0, help="gradients per update (default: half the workers)")
    ap.add_argument("--hidden", type=int, default=512, help="hidden units (parameters: about 277 x hidden)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seconds", type=float, default=60.0, help="stop after this long")
    ap.add_argument("--target", type=float, default=0.82, help="stop once the test accuracy reaches it")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between progress lines")
    ap.add_argument("--naive", action="store_true", help="the server gets every gradient and sums them itself")
    ap.add_argument("--ray", action="store_true", help="the same as --system ray")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--png", default="", help="write the accuracy curve here")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def train(rt, a, k, first_worker=0):
    """The server's loop on runtime `rt` (Phalanx or Ray); workers on nodes
    first_worker, first_worker + 1, ... (mod the nodes). Returns a dict of
    what it measured."""
    dim, classes, shard = 256, 20, 20000
    model = MLP(dim, a.hidden, classes)
    params = model.init(np.random.default_rng(a.seed))
    velocity = np.zeros_like(params)
    test_x, test_y = make_data(4000, dim, classes, seed=10_000 + a.seed)
    workers = [rt.make_worker(first_worker + i, a.seed * 1000 + i, shard, dim, a.hidden, classes, a.batch)
               for i in range(a.workers)]
    way = "naive get and sum" if rt.naive else "collective.reduce"
    print(f"{rt.name}: {a.workers} workers, {k} gradients per update ({way}); model {model.size:,} parameters "
          f"({model.size * 4 / 2**20:.1f} MiB)", flush=True)

    start = time.monotonic()
    ref = rt.rt.put(params)
    in_flight = {w.gradient.remote(ref): w for w in workers}
    spent = {"gradients": 0.0, "step": 0.0, "publish": 0.0}
    updates = samples = 0
    loss_sum = loss_n = 0.0
    acc = model.accuracy(params, test_x, test_y)
    curve = [(0.0, acc)]
    next_report = start + a.every
    while True:
        t0 = time.monotonic()
        total, used = rt.sum_first(in_flight, k, timeout=120)
        t1 = time.monotonic()
        grad, (loss, n) = total[:-STATS], total[-STATS:]
        velocity = 0.9 * velocity + grad / n
        params = (params - a.lr * velocity).astype(np.float32)
        t2 = time.monotonic()
        ref = rt.rt.put(params)
        for r in used:  # only the workers whose gradients went in get the new parameters
            w = in_flight.pop(r)
            in_flight[w.gradient.remote(ref)] = w
        t3 = time.monotonic()
        spent["gradients"] += t1 - t0
        spent["step"] += t2 - t1
        spent["publish"] += t3 - t2
        updates += 1
        samples += int(n)
        loss_sum += float(loss)
        loss_n += float(n)
        now = time.monotonic()
        if now >= next_report or now - start > a.seconds:
            acc = model.accuracy(params, test_x, test_y)
            elapsed = now - start
            curve.append((elapsed, acc))
            print(f"{elapsed:6.1f} s  update {updates:6d}  {updates / elapsed:7.1f} updates/s  "
                  f"{samples / elapsed:9.0f} samples/s  loss {loss_sum / max(loss_n, 1):.3f}  test accuracy {acc:.3f}",
                  flush=True)
            loss_sum = loss_n = 0.0
            next_report = now + a.every
            if acc >= a.target or elapsed > a.seconds:
                break
    elapsed = time.monotonic() - start
    busy = sum(spent.values())
    shares = ", ".join(f"{name} {100 * t / busy:.0f}%" for name, t in spent.items())
    print(f"done ({rt.name}, {way}): {updates} updates in {elapsed:.1f} s ({updates / elapsed:.1f} updates/s, "
          f"{samples / elapsed:.0f} samples/s), test accuracy {acc:.3f}; the server's time: {shares}", flush=True)
    return {"system": rt.name, "way": way, "updates_per_s": updates / elapsed, "samples_per_s": samples / elapsed,
            "accuracy": acc, "seconds": elapsed, "time_to_target_s": elapsed if acc >= a.target else None,
            "parameters": model.size, "model_bytes": 4 * model.size, "curve": curve,
            **{f"{n}_share": t / busy for n, t in spent.items()}}


if __name__ == "__main__":
    sys.exit(main())
