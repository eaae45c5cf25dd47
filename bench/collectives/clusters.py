"""Clusters for the collectives benchmarks: phalanx raylets on loopback or one
per network namespace (../shared/bench/peers/netns.sh names them pnodeK, at
10.77.0.K+1), and Ray's ray.cluster_utils.Cluster on loopback. Node k offers
the resource "nK" so an actor can be pinned to it. Results are CSV lines in
the format ../shared/bench/peers writes (peer,op,world,bytes,median_s,min_s,max_s)."""
import statistics
import time
import uuid

from phalanx._private import api, state
from phalanx._private.node import NodeProcesses, new_session_dir


def rate_bytes_per_s(rate):
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for u, f in units.items():
        if rate.endswith(u):
            return float(rate[: -len(u)]) * f / 8
    raise ValueError(f"--rate wants e.g. 1gbit, got {rate}")


def add_cluster_args(ap):
    """The flags every collectives benchmark takes: nodes, sizes, repetitions, network."""
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--sizes", default="1024,1048576,33554432")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--netns", action="store_true", help="node k runs in namespace pnodeK at 10.77.0.K+1")
    ap.add_argument("--rate", help="link rate (e.g. 1gbit) for the S/B column")
    ap.add_argument("--chunk-bytes", type=int, help="raylet --transfer-chunk-bytes")
    ap.add_argument("--window", type=int, help="raylet --transfer-window")


def start_phalanx(nodes, netns=False, chunk_bytes=None, window=None):
    """Starts redis and `nodes` raylets (1 CPU each) and connects this
    process as the driver on node 0. Returns the NodeProcesses to stop."""
    node = NodeProcesses(new_session_dir())
    ip = (lambda k: f"10.77.0.{k + 1}") if netns else (lambda k: "127.0.0.1")
    extra = ["--heartbeat-ms", "200"]
    if chunk_bytes:
        extra += ["--transfer-chunk-bytes", str(chunk_bytes)]
    if window:
        extra += ["--transfer-window", str(window)]
    token = uuid.uuid4().hex if netns else None
    try:
        redis = node.start_redis(host=ip(0), password=token)
        head = node.start_raylet(redis, num_cpus=1, node_ip=ip(0), token=token,
                                 extra_args=extra + ["--resources", '{"n0": 1}'])
        for k in range(1, nodes):
            node.start_raylet(redis, num_cpus=1, node_ip=ip(k), token=token,
                              netns=f"pnode{k}" if netns else None,
                              extra_args=extra + ["--resources", f'{{"n{k}": 1}}'])
        api._connect(head)
        state.mode = "driver"
        time.sleep(1.0)  # every raylet has read the node table
    except BaseException:
        node.stop()
        raise
    return node


def stop_phalanx(node):
    import phalanx
    phalanx.shutdown()
    node.stop()


def start_ray(nodes):
    """A Ray cluster of `nodes` nodes on loopback (1 CPU each, resource nK)."""
    import ray
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "resources": {"n0": 1}})
    for k in range(1, nodes):
        cluster.add_node(num_cpus=1, resources={f"n{k}": 1})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    cluster.wait_for_nodes()
    return cluster


def stop_ray(cluster):
    import ray
    ray.shutdown()
    cluster.shutdown()


def measure(run, warmup, reps, prepare=None, pause=0.2):
    """Seconds each of `reps` calls of run() took, after `warmup` untimed
    ones, with `pause` s between. With `prepare`, each call is run(prepare()),
    prepare untimed (and its value dropped before the next)."""
    times = []
    for rep in range(warmup + reps):
        args = (prepare(),) if prepare else ()
        t = time.perf_counter()
        run(*args)
        if rep >= warmup:
            times.append(time.perf_counter() - t)
        del args
        time.sleep(pause)
    return times


def csv_line(peer, op, nodes, size, times, rate=None, extra=""):
    med = statistics.median(times)
    line = f"{peer},{op},{nodes},{size},{med:.6f},{min(times):.6f},{max(times):.6f}"
    if rate:
        limit = size / rate_bytes_per_s(rate)
        line += f"  # S/B {limit * 1e3:.1f} ms, {med / limit:.2f} x S/B"
    return line + extra
