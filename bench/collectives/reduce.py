"""Reduce and allreduce of float32 arrays produced by one actor per node,
through phalanx.collective, and the same with Ray (gradients summed by the
driver), in one run.

    .venv/bin/python bench/collectives/reduce.py --nodes 4                # loopback, phalanx then Ray
    .venv/bin/python bench/collectives/reduce.py --nodes 4 --peers none   # phalanx only
    N=8 bench/collectives/run_netns.sh reduce.py                          # one node per namespace, 1 Gbit/s

Ops, each timed from the actor calls to the last byte where it is needed:
  reduce     every actor returns its array (already in memory); the driver
             gets the sum: phalanx.collective.reduce / Ray: get all + np.sum.
  reduce_ready
             reduce of arrays already made (by an untimed actor call, left
             where they are), until the driver has the sum: as the peers
             time their reduce (their buffers are in memory when the clock
             starts).
  gather     the floor under reduce: the same calls, their values got by
             the driver and summed there with numpy (what Ray's reduce is).
  allreduce  the same, then every actor reads the sum (a ref passed to it).
  allreduce_ready
             allreduce of arrays already in each node's store (made by an
             untimed actor call), until every actor has read its result: as
             the peers time it (their buffers are in memory when the clock
             starts), and compared with their allreduce.
  group_allreduce
             the actors form a static group (init_group) and allreduce
             their arrays in place, as with Gloo's or MPI's API: each rank
             times its own call after a barrier; the figure is the slowest
             rank's, compared with the peers' allreduce.
  staggered  reduce, with actor k answering k/(N-1) x 2 S/B late (the inputs
             spread over twice the one-transfer time); the figure is the
             completion time after the last input was ready (target: at most
             0.5 x S/B), against a peer that waits for all inputs first.

CSV lines as ../shared/bench/peers writes them (peer,op,world,bytes,median_s,
min_s,max_s) with, given --rate (default 1gbit for the staggered spread), S/B."""
import argparse
import sys
import time

import numpy as np

from clusters import (PHALANX, add_cluster_args, csv_line, measure, pause_for, rate_bytes_per_s, start_phalanx, start_ray, stop_phalanx,
                      stop_ray)


class GradBody:
    """One actor per node: holds its gradient, returns it when asked."""

    def __init__(self, k):
        self.k = k
        self.grads = {}

    def grad(self, size, delay=0.0):
        if size not in self.grads:
            self.grads[size] = np.full(size // 4, self.k + 1, np.float32)
        if delay:
            time.sleep(delay)
        return self.grads[size]

    def read(self, total):
        return float(total[0]) + float(total[-1])

    def group_init(self, world):
        import phalanx
        phalanx.collective.init_group(world, self.k, "bench", timeout=120)

    def group_allreduce(self, size, calls, want):
        """Seconds each of `calls` in-place allreduces took on this rank."""
        import phalanx
        a = np.empty(size // 4, np.float32)
        times = []
        for _ in range(calls):
            a[...] = self.k + 1
            phalanx.collective.barrier(group_name="bench", timeout=300)
            t = time.perf_counter()
            phalanx.collective.allreduce(a, group_name="bench", timeout=300)
            times.append(time.perf_counter() - t)
            assert a[0] == want and a[-1] == want
        return times


def expect_sum(nodes):
    return float(nodes * (nodes + 1) // 2)


def bench_phalanx(a, sizes, ops):
    import phalanx
    node = start_phalanx(a.nodes, a.netns, a.chunk_bytes, a.window)
    try:
        Grad = phalanx.remote(GradBody)
        actors = [Grad.options(resources={f"n{k}": 1}).remote(k) for k in range(a.nodes)]
        phalanx.get([g.read.remote(np.ones(1, np.float32)) for g in actors], timeout=120)
        want = expect_sum(a.nodes)
        for size in sizes:
            phalanx.get([g.grad.remote(size) for g in actors], timeout=300)  # arrays made once, up front

            def reduce_once():
                out = phalanx.collective.reduce([g.grad.remote(size) for g in actors], timeout=300)
                assert phalanx.get(out, timeout=300)[0] == want

            def gather_once():
                got = phalanx.get([g.grad.remote(size) for g in actors], timeout=300)
                assert np.sum(got, axis=0)[0] == want

            def allreduce_once():
                outs = phalanx.collective.allreduce([g.grad.remote(size) for g in actors], timeout=300)
                got = phalanx.get([g.read.remote(o) for g, o in zip(actors, outs)], timeout=300)
                assert got == [2 * want] * a.nodes

            def inputs_ready():
                refs = [g.grad.remote(size) for g in actors]
                phalanx.wait(refs, num_returns=len(refs), timeout=300, fetch_local=False)  # (left where made)
                return refs

            def reduce_ready_once(refs):
                out = phalanx.collective.reduce(refs, timeout=300)
                assert phalanx.get(out, timeout=300)[0] == want

            def allreduce_ready_once(refs):
                outs = phalanx.collective.allreduce(refs, timeout=300)
                got = phalanx.get([g.read.remote(o) for g, o in zip(actors, outs)], timeout=300)
                assert got == [2 * want] * a.nodes

            spread = 2 * size / rate_bytes_per_s(a.rate or "1gbit")

            def staggered_once():
                delays = [spread * k / max(1, a.nodes - 1) for k in range(a.nodes)]
                t0 = time.perf_counter()
                out = phalanx.collective.reduce([g.grad.remote(size, d) for g, d in zip(actors, delays)],
                                                timeout=300)
                assert phalanx.get(out, timeout=300)[0] == want
                return time.perf_counter() - t0 - max(delays)

            before = phalanx.cluster_stats()
            report(a, PHALANX, size, ops, reduce_once, allreduce_once, staggered_once,
                   (allreduce_ready_once, inputs_ready))
            if "reduce_ready" in ops:
                print(csv_line(PHALANX, "reduce_ready", a.nodes, size,
                               measure(reduce_ready_once, a.warmup, a.reps, prepare=inputs_ready,
                                       pause=pause_for(size)), a.rate), flush=True)
            if "gather" in ops:
                print(csv_line(PHALANX, "gather", a.nodes, size,
                               measure(gather_once, a.warmup, a.reps, pause=pause_for(size)), a.rate), flush=True)
            if "group_allreduce" in ops:
                if size == sizes[0]:
                    phalanx.get([g.group_init.remote(a.nodes) for g in actors], timeout=180)
                per_rank = phalanx.get([g.group_allreduce.remote(size, a.warmup + a.reps, want) for g in actors],
                                       timeout=600)
                slowest = [max(t) for t in zip(*per_rank)][a.warmup:]
                print(csv_line(PHALANX, "group_allreduce", a.nodes, size, slowest, a.rate), flush=True)
            after = phalanx.cluster_stats()
            print(f"# phalanx {size} bytes: {after['reduce_chains'] - before['reduce_chains']} reduces ran as a chain "
                  f"over the inputs' nodes, {after['reduce_fallbacks'] - before['reduce_fallbacks']} fell back",
                  flush=True)
    finally:
        stop_phalanx(node)


def bench_ray(a, sizes, ops):
    cluster = start_ray(a.nodes, a.netns)  # (before ray is imported: it may set Ray's environment)
    import ray
    try:
        Grad = ray.remote(GradBody)
        actors = [Grad.options(resources={f"n{k}": 1}).remote(k) for k in range(a.nodes)]
        ray.get([g.read.remote(np.ones(1, np.float32)) for g in actors], timeout=120)
        want = expect_sum(a.nodes)
        for size in sizes:
            ray.get([g.grad.remote(size) for g in actors], timeout=300)

            def reduce_once():
                assert np.sum(ray.get([g.grad.remote(size) for g in actors], timeout=300), axis=0)[0] == want

            def allreduce_once():
                total = ray.put(np.sum(ray.get([g.grad.remote(size) for g in actors], timeout=300), axis=0))
                assert ray.get([g.read.remote(total) for g in actors], timeout=300) == [2 * want] * a.nodes

            def inputs_ready():
                refs = [g.grad.remote(size) for g in actors]
                ray.wait(refs, num_returns=len(refs), timeout=300, fetch_local=False)
                return refs

            def allreduce_ready_once(refs):
                total = ray.put(np.sum(ray.get(refs, timeout=300), axis=0))
                assert ray.get([g.read.remote(total) for g in actors], timeout=300) == [2 * want] * a.nodes

            spread = 2 * size / rate_bytes_per_s(a.rate or "1gbit")

            def staggered_once():
                delays = [spread * k / max(1, a.nodes - 1) for k in range(a.nodes)]
                t0 = time.perf_counter()
                refs = [g.grad.remote(size, d) for g, d in zip(actors, delays)]
                assert np.sum(ray.get(refs, timeout=300), axis=0)[0] == want
                return time.perf_counter() - t0 - max(delays)

            report(a, "ray", size, ops, reduce_once, allreduce_once, staggered_once,
                   (allreduce_ready_once, inputs_ready))
    finally:
        stop_ray(cluster)


def report(a, peer, size, ops, reduce_once, allreduce_once, staggered_once, ready):
    if "reduce" in ops:
        print(csv_line(peer, "reduce", a.nodes, size, measure(reduce_once, a.warmup, a.reps, pause=pause_for(size)),
                       a.rate), flush=True)
    if "allreduce" in ops:
        print(csv_line(peer, "allreduce", a.nodes, size,
                       measure(allreduce_once, a.warmup, a.reps, pause=pause_for(size)), a.rate), flush=True)
    if "allreduce_ready" in ops:
        once, prepare = ready
        print(csv_line(peer, "allreduce_ready", a.nodes, size,
                       measure(once, a.warmup, a.reps, prepare=prepare, pause=pause_for(size)), a.rate), flush=True)
    if "staggered" in ops:
        after = [staggered_once() for _ in range(a.warmup + a.reps)][a.warmup:]
        limit = size / rate_bytes_per_s(a.rate or "1gbit")
        print(csv_line(peer, "reduce_staggered_after_last", a.nodes, size, after, a.rate,
                       extra=f"  # after the last input: {np.median(after) / limit:.2f} x S/B"), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cluster_args(ap)
    ap.add_argument("--ops", default="reduce,reduce_ready,allreduce,allreduce_ready,group_allreduce,staggered",
                    help="comma list; also gather (the calls alone, the floor under reduce)")
    ap.add_argument("--peers", choices=["ray", "none"], default="ray",
                    help="after phalanx, measure Ray the same way (pip extra 'bench')")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    ops = set(a.ops.split(","))
    bench_phalanx(a, sizes, ops)
    if a.peers == "ray":
        bench_ray(a, sizes, ops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
