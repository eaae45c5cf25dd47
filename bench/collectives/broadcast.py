"""Broadcast through phalanx's object layer: one float32 array put on node 0,
read at once by actors on nodes 1..N-1 (each gets the ref as an argument, so
each node's raylet copies it, choosing its source in the object directory).
A repetition is timed from the calls to the last reader's answer.

    # on loopback (all nodes share 127.0.0.1), then Ray the same way:
    .venv/bin/python bench/collectives/broadcast.py --nodes 4
    .venv/bin/python bench/collectives/broadcast.py --nodes 4 --peer ray
    # one node per network namespace with 1 Gbit/s links: bench/collectives/run_netns.sh

Prints one CSV line per size (peer,op,world,bytes,median_s,min_s,max_s, as
../shared/bench/peers writes them) and, with --rate, the physical limit S/B
and the ratio to it."""
import argparse
import os
import statistics
import sys
import time
import uuid

import numpy as np

import phalanx
from phalanx._private import api, state
from phalanx._private.node import NodeProcesses, new_session_dir


def rate_bytes_per_s(rate):
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for u, f in units.items():
        if rate.endswith(u):
            return float(rate[: -len(u)]) * f / 8
    raise ValueError(f"--rate wants e.g. 1gbit, got {rate}")


def run_ray(nodes, sizes, warmup, reps):
    """The same broadcast with Ray (loopback only): ray.cluster_utils.Cluster
    with `nodes` nodes, the array put by the driver on node 0, one actor per
    other node reading it as an argument."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for k in range(1, nodes):
        cluster.add_node(num_cpus=1, resources={f"n{k}": 1})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        cluster.wait_for_nodes()

        @ray.remote
        class Reader:
            def read(self, x):
                return x.nbytes

        readers = [Reader.options(resources={f"n{k}": 1}).remote() for k in range(1, nodes)]
        ray.get([r.read.remote(np.ones(1, np.float32)) for r in readers])
        for size in sizes:
            times = []
            for rep in range(warmup + reps):
                ref = ray.put(np.ones(size // 4, dtype=np.float32))
                t = time.perf_counter()
                got = ray.get([r.read.remote(ref) for r in readers], timeout=300)
                dt = time.perf_counter() - t
                assert got == [size] * (nodes - 1)
                if rep >= warmup:
                    times.append(dt)
                del ref
                time.sleep(0.3)
            med = statistics.median(times)
            print(f"ray,broadcast,{nodes},{size},{med:.6f},{min(times):.6f},{max(times):.6f}", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--sizes", default="1024,1048576,33554432")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--netns", action="store_true", help="node k runs in namespace pnodeK at 10.77.0.K+1")
    ap.add_argument("--rate", help="link rate (e.g. 1gbit) for the S/B column")
    ap.add_argument("--chunk-bytes", type=int, help="raylet --transfer-chunk-bytes")
    ap.add_argument("--window", type=int, help="raylet --transfer-window")
    ap.add_argument("--peer", choices=["ray"], help="measure this peer instead (loopback only; pip extra 'bench')")
    a = ap.parse_args()
    if a.peer == "ray":
        if a.netns:
            ap.error("--peer ray runs on loopback only")
        return run_ray(a.nodes, [int(s) for s in a.sizes.split(",")], a.warmup, a.reps)

    node = NodeProcesses(new_session_dir())
    ip = (lambda k: f"10.77.0.{k + 1}") if a.netns else (lambda k: "127.0.0.1")
    extra = ["--heartbeat-ms", "200"]
    if a.chunk_bytes:
        extra += ["--transfer-chunk-bytes", str(a.chunk_bytes)]
    if a.window:
        extra += ["--transfer-window", str(a.window)]
    token = uuid.uuid4().hex if a.netns else None
    try:
        redis = node.start_redis(host=ip(0), password=token)
        head = node.start_raylet(redis, num_cpus=1, node_ip=ip(0), extra_args=extra, token=token)
        for k in range(1, a.nodes):
            node.start_raylet(redis, num_cpus=1, node_ip=ip(k), token=token,
                              netns=f"pnode{k}" if a.netns else None,
                              extra_args=extra + ["--resources", f'{{"n{k}": 1}}'])
        api._connect(head)
        state.mode = "driver"
        time.sleep(1.0)  # every raylet has read the node table

        @phalanx.remote
        class Reader:
            def read(self, x):
                return x.nbytes

            def where(self):
                return os.getppid()

        readers = [Reader.options(resources={f"n{k}": 1}).remote() for k in range(1, a.nodes)]
        hosts = phalanx.get([r.where.remote() for r in readers], timeout=120)
        assert len(set(hosts)) == a.nodes - 1, "every reader on its own node"
        for size in (int(s) for s in a.sizes.split(",")):
            times = []
            for rep in range(a.warmup + a.reps):
                ref = phalanx.put(np.ones(size // 4, dtype=np.float32))
                t = time.perf_counter()
                got = phalanx.get([r.read.remote(ref) for r in readers], timeout=300)
                dt = time.perf_counter() - t
                assert got == [size] * (a.nodes - 1)
                if rep >= a.warmup:
                    times.append(dt)
                del ref
                time.sleep(0.3)
            med = statistics.median(times)
            line = f"phalanx,broadcast,{a.nodes},{size},{med:.6f},{min(times):.6f},{max(times):.6f}"
            if a.rate:
                limit = size / rate_bytes_per_s(a.rate)
                line += f"  # S/B {limit * 1e3:.1f} ms, {med / limit:.2f} x S/B"
            print(line, flush=True)
    finally:
        phalanx.shutdown()
        node.stop()


if __name__ == "__main__":
    sys.exit(main())
