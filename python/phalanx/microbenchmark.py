"""phalanx micro-benchmarks, with Ray's metric names, beside Ray and Dask
distributed measured in the same run on the same machine, and a plain
memcpy of the same bytes.

    python -m phalanx.microbenchmark                  # phalanx, ray, dask, memcpy
    python -m phalanx.microbenchmark --peers none     # phalanx and memcpy only
    python -m phalanx.microbenchmark --json out.json
    phalanx microbenchmark --peers none               # the same, from the CLI

In a checkout, bench/microbenchmark.py runs this file against the phalanx
Python imports: the venv's, or another build's with PYTHONPATH (as
bench/ab_microbenchmark.py does, older builds included).

Ray and Dask are installed with `pip install .[bench]` (scripts/bench.sh does
it); they are peers to measure against, never dependencies of phalanx. Each
system runs in its own subprocess, one after the other, with as many CPUs as
the machine has. Every figure is the median of --reps timed windows of
--duration seconds each, after a warm-up.

Metrics (the same definitions for every system):
  single client tasks sync       get(f.remote()) one at a time, f a no-op
  single client tasks async      get([f.remote() for _ in range(1000)])
  single client get calls        get(ref) of a put(0) held by this client
  single client put calls        put(0)
  single client put gigabytes    put(np.ones(100 Mi int64 = 800 MiB)); Ray's uses np.zeros, whose
                                 untouched zero pages make any copy look faster than memory
  get 1 GiB array (ms)           get(ref) of a 1 GiB float32 array already stored
  get 1 MiB array (ms)           the same for 1 MiB: equal times mean O(1) in size
  1:1 actor calls sync           get(a.ping.remote()) one at a time
  1:1 actor calls async          get([a.ping.remote() for _ in range(1000)])
  1:1 actor calls with args async  the same with a 1 KiB bytes argument echoed back
  n:n actor calls async          n = CPUs actors, each driven by its own task with 500 calls
  1:1 async actor calls async    get([a.ping.remote() for _ in range(1000)]) on an actor whose ping is
                                 async def (Ray's "1:1 async-actor calls async")
  generator items streamed      items/s of `[get(r) for r in g.remote(1000)]`, g a task that yields 1000
                                 small ints (Ray's num_returns="streaming")
  placement group create+remove  100 groups of one bundle {"custom": 0.001}, pg.wait() on each, then
                                 remove_placement_group on each (Ray's ray_perf.py "placement group
                                 create/removal"; both clusters declare {"custom": 100})
  ..., through the raylet        phalanx only: the 1:1 calls with PHALANX_DIRECT_ACTOR_CALLS=0
                                 (caller -> raylet -> actor), to show what going direct buys
  multi-node tasks async         3 raylets (1 CPU each) on this machine sharing one GCS, tasks
                                 with the SPREAD strategy; Ray: ray.cluster_utils.Cluster
  compiled graph, ...            Ray's Compiled Graphs API (phalanx.dag / ray.dag): one actor's
                                 `echo.bind(inp)`, and a chain a -> b -> c of `inc`, compiled once;
                                 each execution timed alone (get(compiled.execute(i))), median
                                 and 99th percentile over every execution of the windows; and
                                 executions per second keeping 8 in flight on the chain; and the one
                                 actor's echo of a 4 MiB float32 array (median)

The dask-peers column is shared/bench/peers/tasks.py --inproc-scheduler
(LocalCluster with 2 worker processes) run as it is; only its figures whose definitions
match ours are shown (its 1 GiB get copies the array to the client).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import phalanx
from phalanx.util.placement_group import placement_group, remove_placement_group

METRICS = [
    ("single client tasks sync", "tasks/s", 5000),
    ("single client tasks async", "tasks/s", 20000),
    ("single client get calls", "calls/s", 20000),
    ("single client put calls", "calls/s", 10000),
    ("single client put gigabytes", "GB/s", None),
    ("get 1 GiB array (ms)", "ms", None),
    ("get 1 MiB array (ms)", "ms", None),
    ("1:1 actor calls sync", "calls/s", 6000),
    ("1:1 actor calls async", "calls/s", 25000),
    ("1:1 actor calls with args async", "calls/s", None),
    ("n:n actor calls async", "calls/s", None),
    ("1:1 async actor calls async", "calls/s", None),
    ("generator items streamed", "items/s", None),
    ("placement group create+remove", "groups/s", None),
    ("1:1 actor calls sync, through the raylet", "calls/s", None),
    ("1:1 actor calls async, through the raylet", "calls/s", None),
    ("multi-node tasks async (3 raylets, SPREAD)", "tasks/s", None),
    ("compiled graph, 1 actor: execute+get median", "us", None),
    ("compiled graph, 1 actor: execute+get p99", "us", None),
    ("compiled graph, 1 actor, 4 MiB array: execute+get median", "us", None),
    ("compiled graph, 3-actor chain: execute+get median", "us", None),
    ("compiled graph, 3-actor chain: execute+get p99", "us", None),
    ("compiled graph, 3-actor chain: executions/s, 8 in flight", "executions/s", None),
]
PUT_BIG_ELEMS = 100 * 1024 * 1024  # int64: 800 MiB, as in Ray's benchmark


def window_rates(fn, units_per_call, duration, reps):
    """Units per second in each of `reps` windows of `duration` seconds, after one warm-up call."""
    fn()  # warm-up
    rates = []
    for _ in range(reps):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= duration:
                break
        rates.append(calls * units_per_call / elapsed)
    return rates


def timed_rate(fn, units_per_call, duration, reps):
    """Median over `reps` windows of units per second."""
    return statistics.median(window_rates(fn, units_per_call, duration, reps))


def timed_ms(fn, n=20):
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def run_suite(api, duration, reps):
    """The metrics for a system exposing remote(f), get(x), put(x)."""
    remote_noop, get, put = api["noop"], api["get"], api["put"]
    out = {}
    out["single client tasks sync"] = timed_rate(lambda: get(remote_noop()), 1, duration, reps)
    out["single client tasks async"] = timed_rate(lambda: get([remote_noop() for _ in range(1000)]), 1000,
                                                  duration, reps)
    small = put(0)
    out["single client get calls"] = timed_rate(lambda: get(small), 1, duration, reps)
    out["single client put calls"] = timed_rate(lambda: put(0), 1, duration, reps)
    arr = np.ones(PUT_BIG_ELEMS, dtype=np.int64)  # filled: zero pages would flatter every copy
    out["single client put gigabytes"] = timed_rate(lambda: put(arr), arr.nbytes / 1e9, duration, reps)
    del arr
    big = put(np.ones(256 * 1024 * 1024, dtype=np.float32))
    out["get 1 GiB array (ms)"] = timed_ms(lambda: get(big), 10)
    del big
    mib = put(np.ones(256 * 1024, dtype=np.float32))
    out["get 1 MiB array (ms)"] = timed_ms(lambda: get(mib), 50)
    if "gen" in api:
        gen = api["gen"]
        out["generator items streamed"] = timed_rate(lambda: [get(r) for r in gen(1000)], 1000, duration, reps)
    if "pg" in api:
        create, remove = api["pg"]

        def pg_rounds(n=100):  # as Ray's ray_perf.py "placement group create/removal"
            pgs = [create([{"custom": 0.001}]) for _ in range(n)]
            assert all(pg.wait(timeout_seconds=30) for pg in pgs)
            for pg in pgs:
                remove(pg)
        out["placement group create+remove"] = timed_rate(pg_rounds, 100, duration, reps)
    if "actor" in api:
        out.update(run_actor_suite(api, duration, reps))
    return out


def run_actor_suite(api, duration, reps):
    get, call, actor = api["get"], api["call"], api["actor"]()
    arg = b"x" * 1024
    out = {"1:1 actor calls sync": timed_rate(lambda: get(call(actor, "ping")), 1, duration, reps),
           "1:1 actor calls async": timed_rate(lambda: get([call(actor, "ping") for _ in range(1000)]), 1000,
                                               duration, reps),
           "1:1 actor calls with args async": timed_rate(
               lambda: get([call(actor, "echo", arg) for _ in range(1000)]), 1000, duration, reps)}
    if "n_to_n" in api:
        out["n:n actor calls async"] = timed_rate(api["n_to_n"], api["n_to_n_calls"], duration, reps)
    if "async_actor" in api:  # Ray's "1:1 async-actor calls async": an actor whose methods are async def
        a = api["async_actor"]()
        get(call(a, "ping"))
        out["1:1 async actor calls async"] = timed_rate(lambda: get([call(a, "ping") for _ in range(1000)]), 1000,
                                                        duration, reps)
    return out


class _Pinger:
    def ping(self):
        return None

    def echo(self, x):
        return x


class _AsyncPinger:
    async def ping(self):
        return None


def _yield_ints(n):
    for i in range(n):
        yield i


def _n_to_n(remote, get, n):
    """n actors, each driven by its own caller task with 500 async calls."""
    actors = [remote(_Pinger).remote() for _ in range(n)]

    @remote
    def drive(a):
        get([a.ping.remote() for _ in range(500)])

    get([a.ping.remote() for a in actors])
    return lambda: get([drive.remote(a) for a in actors]), 500 * n


def bench_phalanx(duration, reps):
    phalanx.init(resources={"custom": 100})  # (for the placement group row, as Ray's benchmark)

    @phalanx.remote
    def noop():
        return None

    n = os.cpu_count()
    n_to_n, calls = _n_to_n(phalanx.remote, phalanx.get, n)
    gen = phalanx.remote(num_returns="streaming")(_yield_ints)
    try:
        return run_suite({"noop": noop.remote, "get": phalanx.get, "put": phalanx.put, "gen": gen.remote,
                          "pg": (placement_group, remove_placement_group),
                          "actor": lambda: phalanx.remote(_Pinger).remote(),
                          "async_actor": lambda: phalanx.remote(_AsyncPinger).remote(),
                          "call": lambda a, m, *args: getattr(a, m).remote(*args),
                          "n_to_n": n_to_n, "n_to_n_calls": calls}, duration, reps)
    finally:
        phalanx.shutdown()


def bench_phalanx_raylet_path(duration, reps):
    """Actor calls with the direct path turned off: caller -> raylet -> actor, for comparison."""
    os.environ["PHALANX_DIRECT_ACTOR_CALLS"] = "0"
    phalanx.init(num_cpus=os.cpu_count())
    try:
        actor = phalanx.remote(_Pinger).remote()
        get = phalanx.get
        return {"1:1 actor calls sync, through the raylet": timed_rate(lambda: get(actor.ping.remote()), 1,
                                                                      duration, reps),
                "1:1 actor calls async, through the raylet": timed_rate(
                    lambda: get([actor.ping.remote() for _ in range(1000)]), 1000, duration, reps)}
    finally:
        phalanx.shutdown()


def bench_phalanx_multinode(duration, reps):
    """Three raylets on this machine sharing one GCS; tasks spread over them."""
    phalanx.init(num_nodes=3, num_cpus=1)  # returns once every raylet has read the node table
    try:
        @phalanx.remote(scheduling_strategy="SPREAD")
        def noop():
            return None
        rate = timed_rate(lambda: phalanx.get([noop.remote() for _ in range(1000)]), 1000, duration, reps)
        return {"multi-node tasks async (3 raylets, SPREAD)": rate}
    finally:
        phalanx.shutdown()


def bench_ray_multinode(duration, reps):
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        cluster.wait_for_nodes()

        @ray.remote(scheduling_strategy="SPREAD")
        def noop():
            return None
        rate = timed_rate(lambda: ray.get([noop.remote() for _ in range(1000)]), 1000, duration, reps)
        return {"multi-node tasks async (3 raylets, SPREAD)": rate}
    finally:
        ray.shutdown()
        cluster.shutdown()


def bench_ray(duration, reps):
    import ray

    ray.init(num_cpus=os.cpu_count(), resources={"custom": 100}, include_dashboard=False, log_to_driver=False,
             configure_logging=False)

    @ray.remote
    def noop():
        return None

    n_to_n, calls = _n_to_n(ray.remote, ray.get, os.cpu_count())
    gen = ray.remote(num_returns="streaming")(_yield_ints)
    from ray.util.placement_group import placement_group, remove_placement_group
    try:
        return run_suite({"noop": noop.remote, "get": ray.get, "put": ray.put, "gen": gen.remote,
                          "pg": (placement_group, remove_placement_group),
                          "actor": lambda: ray.remote(_Pinger).remote(),
                          "async_actor": lambda: ray.remote(_AsyncPinger).remote(),
                          "call": lambda a, m, *args: getattr(a, m).remote(*args),
                          "n_to_n": n_to_n, "n_to_n_calls": calls}, duration, reps)
    finally:
        ray.shutdown()


class _Stage:
    def echo(self, x):
        return x

    def inc(self, x):
        return x + 1


def run_dag_suite(remote, get, input_node, duration, reps):
    """The compiled graph rows, for phalanx.dag or ray.dag."""
    a, b, c = (remote(_Stage).remote() for _ in range(3))
    get([s.echo.remote(0) for s in (a, b, c)])  # (the actors are up)
    out = {}

    def latencies(compiled, value=1):
        get(compiled.execute(value))
        samples = []
        for _ in range(reps):
            end = time.perf_counter() + duration
            while time.perf_counter() < end:
                t = time.perf_counter()
                get(compiled.execute(value))
                samples.append((time.perf_counter() - t) * 1e6)
        samples.sort()
        return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]

    with input_node() as inp:
        one = a.echo.bind(inp)
    compiled = one.experimental_compile()
    out["compiled graph, 1 actor: execute+get median"], out["compiled graph, 1 actor: execute+get p99"] = \
        latencies(compiled)
    out["compiled graph, 1 actor, 4 MiB array: execute+get median"], _ = \
        latencies(compiled, np.ones(1 << 20, np.float32))
    compiled.teardown()
    with input_node() as inp:
        chain = c.inc.bind(b.inc.bind(a.inc.bind(inp)))
    compiled = chain.experimental_compile(_max_inflight_executions=8)
    out["compiled graph, 3-actor chain: execute+get median"], \
        out["compiled graph, 3-actor chain: execute+get p99"] = latencies(compiled)

    def eight_in_flight(n=2000):
        refs = [compiled.execute(i) for i in range(8)]
        for i in range(8, n):
            get(refs[i - 8])
            refs.append(compiled.execute(i))
        for r in refs[n - 8:]:
            get(r)
    out["compiled graph, 3-actor chain: executions/s, 8 in flight"] = timed_rate(eight_in_flight, 2000, duration,
                                                                                 reps)
    compiled.teardown()
    return out


def bench_phalanx_dag(duration, reps):
    from phalanx.dag import InputNode
    phalanx.init(num_cpus=4)
    try:
        return run_dag_suite(phalanx.remote, phalanx.get, InputNode, duration, reps)
    finally:
        phalanx.shutdown()


def bench_ray_dag(duration, reps):
    import ray
    from ray.dag import InputNode
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        return run_dag_suite(ray.remote, ray.get, InputNode, duration, reps)
    finally:
        ray.shutdown()


def bench_dask(duration, reps):
    os.environ.setdefault("DASK_DISTRIBUTED__COMM__COMPRESSION", "False")  # move every byte
    import logging

    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=os.cpu_count(), threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=logging.ERROR)
    client = Client(cluster)

    def noop():
        return None

    def get(x):
        if isinstance(x, list) and x and not hasattr(x[0], "key"):  # actor futures
            return [f.result() for f in x]
        if hasattr(x, "result") and not hasattr(x, "key"):
            return x.result()
        return client.gather(x)

    # n:n as for the others: n actors, each driven by its own task with 500 async calls.
    n = os.cpu_count()
    actors = [client.submit(_Pinger, actor=True, pure=False).result() for _ in range(n)]

    def drive(a):
        return [f.result() for f in [a.ping() for _ in range(500)]] and None

    def n_to_n():
        client.gather([client.submit(drive, a, pure=False) for a in actors])

    try:
        return run_suite({"noop": lambda: client.submit(noop, pure=False), "get": get,
                          "put": lambda v: client.scatter(v, hash=False),
                          "actor": lambda: client.submit(_Pinger, actor=True).result(),
                          "call": lambda a, m, *args: getattr(a, m)(*args),
                          "n_to_n": n_to_n, "n_to_n_calls": 500 * n}, duration, reps)
    finally:
        client.close()
        cluster.close()


def bench_memcpy(duration, reps):
    src = np.ones(PUT_BIG_ELEMS, dtype=np.int64)
    dst = np.zeros_like(src)
    dst.fill(2)  # touched: a warm destination
    # One thread, the same bytes as the put: the plain memcpy the put is compared with.
    return {"single client put gigabytes": timed_rate(lambda: np.copyto(dst, src), src.nbytes / 1e9,
                                                      duration, reps)}


def find_peers_script():
    """../shared/bench/peers/tasks.py: the team's own Dask measurement, if present."""
    candidates = [os.environ.get("PHALANX_PEERS_DIR", "")]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(sys.executable))))  # .venv's checkout
    for base in (os.getcwd(), os.path.dirname(os.getcwd()), repo):
        candidates += [os.path.join(base, "shared", "bench", "peers"),
                       os.path.join(base, "..", "shared", "bench", "peers")]
    for c in candidates:
        if c and os.path.exists(os.path.join(c, "tasks.py")):
            return os.path.join(c, "tasks.py")
    return None


def bench_dask_peers_script(duration, reps):
    """Runs shared/bench/peers/tasks.py (dask-scheduler + 2 workers) and maps
    its figures onto ours where the definitions match."""
    script = find_peers_script()
    if script is None:
        raise RuntimeError("shared/bench/peers/tasks.py not found (set PHALANX_PEERS_DIR)")
    # --inproc-scheduler: recent distributed releases no longer ship the
    # dask-scheduler command that the script's default mode starts.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run([sys.executable, script, "--inproc-scheduler", "--max-seconds", "20", "--big-reps", "3"],
                       capture_output=True, text=True, timeout=900, env=env)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "tasks.py failed")
    d = json.loads(p.stdout[p.stdout.index("{"):])
    return {"single client tasks sync": d["task_sync_rtt"]["per_s"],
            "single client tasks async": d["task_async_submit_gather"]["tasks_per_s"],
            "single client put gigabytes": d["put_big_direct"]["GB_per_s"],
            "get 1 GiB array (ms)": d["get_big_direct"]["median_s"] * 1e3}


RUNNERS = {"phalanx": bench_phalanx, "ray": bench_ray, "dask": bench_dask,
           "dask-peers": bench_dask_peers_script, "memcpy": bench_memcpy,
           "phalanx-multinode": bench_phalanx_multinode, "ray-multinode": bench_ray_multinode,
           "phalanx-raylet-path": bench_phalanx_raylet_path, "phalanx-dag": bench_phalanx_dag,
           "ray-dag": bench_ray_dag}


def run_in_subprocess(child, system, duration, reps, timeout):
    cmd = child + ["--_child", system, "--duration", str(duration), "--reps", str(reps)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"{system} ran past {timeout} s"
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return None, f"{system} failed: " + " | ".join(tail)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]), None
    return None, f"{system} printed no result"


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:.3f}"
    if unit == "us":
        return f"{v:.1f}"
    if unit == "GB/s":
        return f"{v:.2f}"
    return f"{v:,.0f}"


def report(results, notes):
    systems = [s for s in ("phalanx", "ray", "dask", "dask-peers", "memcpy") if s in results]
    head = ["metric", "unit"] + systems + [f"phalanx/{s}" for s in systems if s != "phalanx"] + ["target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, unit, target in METRICS:
        row = [name, unit]
        vals = {s: results[s].get(name) for s in systems}
        row += [fmt(vals[s], unit) for s in systems]
        p = vals.get("phalanx")
        for s in systems:
            if s == "phalanx":
                continue
            v = vals[s]
            if p is None or v is None or v == 0:
                row.append("-")
            elif unit in ("ms", "us"):
                row.append(f"{v / p:.1f}x faster" if p < v else f"{p / v:.1f}x slower")
            else:
                row.append(f"{p / v:.2f}")
        if target is not None and p is not None:
            row.append(f">= {target:,}: {'met' if p >= target else 'NOT met'}")
        elif name == "single client put gigabytes" and p and vals.get("memcpy"):
            ratio = p / vals["memcpy"]
            row.append(f">= 0.7 x memcpy: {'met' if ratio >= 0.7 else 'NOT met'} ({ratio:.2f})")
        elif name == "get 1 GiB array (ms)" and p is not None and results["phalanx"].get("get 1 MiB array (ms)"):
            ratio = p / results["phalanx"]["get 1 MiB array (ms)"]
            row.append(f"O(1) in size: {'met' if ratio < 3 else 'NOT met'} (1 GiB / 1 MiB = {ratio:.2f})")
        else:
            row.append("")
        lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text


def main(argv=None, child=None):
    """`child`: the command that runs one system in its own process (this
    module's `--_child SYSTEM ...`); bench/microbenchmark.py passes itself."""
    child = child or [sys.executable, "-m", "phalanx.microbenchmark"]
    ap = argparse.ArgumentParser(prog="phalanx microbenchmark", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="ray,dask,dask-peers",
                    help="comma list of ray, dask, dask-peers (shared/bench/peers/tasks.py), or none")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per timed window")
    ap.add_argument("--reps", type=int, default=3, help="timed windows per metric (median)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per system")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._child:
        res = RUNNERS[a._child](a.duration, a.reps)
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    peers = [] if a.peers == "none" else [p.strip() for p in a.peers.split(",") if p.strip()]
    results, notes = {}, []
    systems = ["phalanx", "phalanx-raylet-path", "phalanx-multinode", "phalanx-dag"] + peers + \
        (["ray-multinode", "ray-dag"] if "ray" in peers else []) + ["memcpy"]
    for system in systems:
        print(f"measuring {system} ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        res, err = run_in_subprocess(child, system, a.duration, a.reps, a.timeout)
        if err:
            notes.append(err)
            if system == "phalanx":
                print(err, file=sys.stderr)
                return 1
            continue
        key = system.replace("-multinode", "").replace("-raylet-path", "").replace("-dag", "")
        results.setdefault(key, {}).update(res)
        print(f"  done in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    notes.append(f"{os.cpu_count()} CPUs; median of {a.reps} windows of {a.duration} s; "
                 f"{time.strftime('%Y-%m-%d %H:%M')}")
    print(report(results, notes))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results, "notes": notes}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
