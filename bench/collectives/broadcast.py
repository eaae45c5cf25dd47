"""Broadcast through phalanx's object layer: one float32 array put on node 0,
read at once by actors on nodes 1..N-1 (each gets the ref as an argument, so
each node's raylet copies it, choosing its source in the object directory).
A repetition is timed from the calls to the last reader's answer.

    # on loopback (all nodes share 127.0.0.1), then Ray the same way:
    .venv/bin/python bench/collectives/broadcast.py --nodes 4 --peers ray
    # one node per network namespace with 1 Gbit/s links, Ray too: bench/collectives/run_netns.sh

Prints one CSV line per size (peer,op,world,bytes,median_s,min_s,max_s, as
../shared/bench/peers writes them) and, with --rate, the physical limit S/B
and the ratio to it."""
import argparse
import os
import sys

import numpy as np

import phalanx
from clusters import (PHALANX, add_cluster_args, csv_line, measure, pause_for, start_phalanx, start_ray, stop_phalanx,
                      stop_ray)


def run_ray(nodes, sizes, warmup, reps, netns, rate):
    """The same broadcast with Ray on the same kind of cluster: the array
    put by the driver on node 0, one actor per other node reading it as an
    argument."""
    cluster = start_ray(nodes, netns)  # (before ray is imported: it may set Ray's environment)
    import ray
    try:
        @ray.remote
        class Reader:
            def read(self, x):
                return x.nbytes

        readers = [Reader.options(resources={f"n{k}": 1}).remote() for k in range(1, nodes)]
        ray.get([r.read.remote(np.ones(1, np.float32)) for r in readers])
        for size in sizes:
            def once(ref):
                assert ray.get([r.read.remote(ref) for r in readers], timeout=300) == [size] * (nodes - 1)

            times = measure(once, warmup, reps, prepare=lambda: ray.put(np.ones(size // 4, dtype=np.float32)),
                            pause=pause_for(size, 0.3))
            print(csv_line("ray", "broadcast", nodes, size, times, rate), flush=True)
    finally:
        stop_ray(cluster)


def run_phalanx(a, sizes):
    node = start_phalanx(a.nodes, a.netns, a.chunk_bytes, a.window)
    try:
        @phalanx.remote
        class Reader:
            def read(self, x):
                return x.nbytes

            def where(self):
                return os.getppid()

        readers = [Reader.options(resources={f"n{k}": 1}).remote() for k in range(1, a.nodes)]
        hosts = phalanx.get([r.where.remote() for r in readers], timeout=120)
        assert len(set(hosts)) == a.nodes - 1, "every reader on its own node"
        for size in sizes:
            def once(ref):
                assert phalanx.get([r.read.remote(ref) for r in readers], timeout=300) == [size] * (a.nodes - 1)

            times = measure(once, a.warmup, a.reps, prepare=lambda: phalanx.put(np.ones(size // 4, dtype=np.float32)),
                            pause=pause_for(size, 0.3))
            print(csv_line(PHALANX, "broadcast", a.nodes, size, times, a.rate), flush=True)
    finally:
        stop_phalanx(node)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cluster_args(ap)
    ap.add_argument("--peers", choices=["ray", "none"], default="ray",
                    help="after phalanx, measure Ray the same way (pip extra 'bench')")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    run_phalanx(a, sizes)
    if a.peers == "ray":
        run_ray(a.nodes, sizes, a.warmup, a.reps, a.netns, a.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
