"""Clusters for the collectives benchmarks: phalanx raylets on loopback or one
per network namespace (../shared/bench/peers/netns.sh names them pnodeK, at
10.77.0.K+1), and Ray's the same two ways. Node k offers
the resource "nK" so an actor can be pinned to it. Ray runs on loopback
(ray.cluster_utils.Cluster) or, with netns, as one `ray start` per namespace. Results are CSV lines in
the format ../shared/bench/peers writes (peer,op,world,bytes,median_s,min_s,max_s)."""
import contextlib
import os
import statistics
import subprocess
import sys
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
    # Untimed first calls: a fresh store's pages are made resident (zero-filled)
    # the first time objects reach them, and each call makes new objects until
    # freed space is reused; the peers time buffers they touched in their own
    # warm-up (2 calls for Gloo's).
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--netns", action="store_true", help="node k runs in namespace pnodeK at 10.77.0.K+1")
    ap.add_argument("--rate", help="link rate (e.g. 1gbit) for the S/B column")
    ap.add_argument("--chunk-bytes", type=int, help="raylet --transfer-chunk-bytes")
    ap.add_argument("--window", type=int, help="raylet --transfer-window")


# The name phalanx's rows carry: "phalanx+tls" when it runs with TLS
# (PHALANX_TLS=1, run_netns.sh's TLS=1 or TLS=both), so one table holds both.
PHALANX = "phalanx+tls" if os.environ.get("PHALANX_TLS") == "1" else "phalanx"


def start_phalanx(nodes, netns=False, chunk_bytes=None, window=None):
    """Starts redis and `nodes` raylets (1 CPU each) and connects this
    process as the driver on node 0. Returns the NodeProcesses to stop."""
    ip = (lambda k: f"10.77.0.{k + 1}") if netns else (lambda k: "127.0.0.1")
    extra = ["--heartbeat-ms", "200"]
    if chunk_bytes:
        extra += ["--transfer-chunk-bytes", str(chunk_bytes)]
    if window:
        extra += ["--transfer-window", str(window)]
    token = uuid.uuid4().hex if netns else None  # (None: the session's own)
    node = NodeProcesses(new_session_dir(), token)
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


def start_ray(nodes, netns=False):
    """A Ray cluster of `nodes` nodes (1 CPU each, resource nK), this process
    its driver: on loopback (ray.cluster_utils.Cluster), or with `netns` one
    `ray start` per namespace pnodeK at 10.77.0.K+1, this process in pnode0.
    Returns what stop_ray takes."""
    if not netns:
        import ray
        from ray.cluster_utils import Cluster
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                                "resources": {"n0": 1}})
        for k in range(1, nodes):
            cluster.add_node(num_cpus=1, resources={f"n{k}": 1})
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes()
        return cluster
    # Ray's GCS wants a token from nodes that are not on its host's loopback
    # (read when ray is imported: this comes first).
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=uuid.uuid4().hex + uuid.uuid4().hex,
                      RAY_USAGE_STATS_ENABLED="0")
    import ray
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    head = "10.77.0.1:6380"
    common = ["--num-cpus", "1", "--object-store-memory", str(2 << 30), "--disable-usage-stats"]
    try:
        for k in range(nodes):
            where = ["--head", "--port", "6380", "--include-dashboard", "false"] if k == 0 else ["--address", head]
            cmd = [ray_bin, "start", *where, "--node-ip-address", f"10.77.0.{k + 1}",
                   "--resources", f'{{"n{k}": 1}}', *common]
            if k > 0:
                cmd = ["ip", "netns", "exec", f"pnode{k}", *cmd]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180)
        ray.init(address=head, log_to_driver=False, configure_logging=False)
        deadline = time.monotonic() + 120
        while sum(n["Alive"] for n in ray.nodes()) < nodes:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {sum(n['Alive'] for n in ray.nodes())} of {nodes} Ray nodes came up")
            time.sleep(0.5)
    except BaseException:
        stop_ray("netns")
        raise
    return "netns"


def stop_ray(cluster):
    import ray
    ray.shutdown()
    if cluster == "netns":  # (ray stop finds its processes by name, in every namespace)
        ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
        subprocess.run([ray_bin, "stop", "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
    else:
        cluster.shutdown()


@contextlib.contextmanager
def cluster(system, nodes, netns=False, by_value=()):
    """A phalanx or Ray cluster (start_phalanx / start_ray) for the length of
    a with-block, stopped after it; yields the runtime module. `by_value`:
    modules whose classes workers get pickled by value (they cannot import
    an example), registered with the system's cloudpickle."""
    if system == "phalanx":
        import cloudpickle
        for m in by_value:
            cloudpickle.register_pickle_by_value(m)
        node = start_phalanx(nodes, netns=netns)
        try:
            import phalanx
            yield phalanx
        finally:
            stop_phalanx(node)
    elif system == "ray":
        handle = start_ray(nodes, netns=netns)  # (first: it sets Ray's token before Ray is imported)
        try:
            import ray
            for m in by_value:
                ray.cloudpickle.register_pickle_by_value(m)
            yield ray
        finally:
            stop_ray(handle)
    else:
        raise ValueError(f"unknown system {system!r} (phalanx, ray)")


# Up to this size a benchmark's repetitions run back to back, as the peers' do
# (each of their repetitions starts right after a barrier, so no rank is idle
# when it starts); larger ones pause between repetitions, letting the last
# one's frees and copies settle.
SMALL_BYTES = 64 * 1024


def pause_for(size, pause=0.2):
    """The pause between repetitions of a call moving `size` bytes."""
    return 0.0 if size <= SMALL_BYTES else pause


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
