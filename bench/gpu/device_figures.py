"""The GPU figures of a device run (scripts/device_test.sh run calls it), each beside the hardware's own
figure from the same run, written as one JSON:

  - GPU scheduling: two num_gpus=0.5 actors share the GPU, a third waits until one goes;
  - a CUDA tensor put into the store and got back onto the GPU (64 MiB, 256 MiB, 1 GiB), beside torch's
    pinned device -> host and host -> device copies and a device -> device copy (issue 38's figures 1
    and 2: put_vs_pinned_d2h and get_vs_pinned_h2d, each to reach 0.8; the first put, which registers
    its pages of the store with CUDA, apart);
  - a num_gpus=1 actor returns a CUDA tensor, the driver (same GPU) gets it;
  - GPU objects (issue 38's figures 3 to 6): a num_gpus=0.5 actor returns a CUDA tensor of 64 MiB and
    1 GiB and the driver on the same GPU gets it (mapped: O(1), <= 1 ms); two raylets on the machine, a GPU
    process on each, GPU -> GPU across them beside the lower of the pinned copies and loopback TCP (>= 0.5);
    a reduce of 8 x 64 MiB CUDA gradients made by GPU actors beside torch's own sum of them in one process
    (<= 2x); IMPALA with the policy published as a GPU object beside a numpy policy (delivery, updates/s);
  - NCCL with one rank: init, an allreduce, what was loaded and which interface (on failure the error and
    NCCL's own log, NCCL_DEBUG=INFO, from a second try in a fresh process);
  - IMPALA (examples/rl/impala.py) with the learner on the GPU for --impala-seconds: env steps/s,
    updates/s, time to a mean reward of 450.

    python3 bench/gpu/device_figures.py --json OUT/figures.json [--impala-seconds 60] [--quick]
    .venv/bin/python bench/gpu/device_figures.py --json /tmp/f.json --quick --cpu   # the script's check here

Every part has a deadline and records its error instead of stopping the others. Without a CUDA device it
says so and exits 2; --cpu runs the same steps on CPU tensors with a declared GPU resource, to check the
script on a machine without a GPU (its figures mean nothing)."""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

import torch

import phalanx

MiB = 1 << 20
DEVICE = "cuda"  # "cpu" with --cpu


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(f, repeat):
    """Median seconds of f() over `repeat` runs, the GPU synchronised around each."""
    ts = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        f()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def timed_get(ref):
    """(seconds, value) of a get of `ref` once it is ready, the GPU synchronised around it."""
    phalanx.wait([ref], timeout=120)
    sync()
    t0 = time.perf_counter()
    v = phalanx.get(ref, timeout=120)
    sync()
    return time.perf_counter() - t0, v


def _text(x):
    """What a timed-out subprocess had written (bytes or str, or None)."""
    return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")


def gbps(nbytes, seconds):
    return round(nbytes / seconds / 1e9, 3) if seconds > 0 else None


@phalanx.remote(num_gpus=0.5)
class Half:
    def gpus(self):
        return phalanx.get_gpu_ids()


@phalanx.remote(num_gpus=1)
class Producer:
    def make(self, nbytes, device):
        import torch as th
        return th.ones(nbytes // 4, dtype=th.float32, device=device)

    def ready(self):
        return True


def gpu_scheduling():
    t0 = time.perf_counter()
    a, b = Half.remote(), Half.remote()
    shared = phalanx.get([a.gpus.remote(), b.gpus.remote()], timeout=60)
    c = Half.remote()
    ready, _ = phalanx.wait([c.gpus.remote()], timeout=3)
    third_waited = not ready
    phalanx.kill(a)
    t1 = time.perf_counter()
    third = phalanx.get(c.gpus.remote(), timeout=60)
    out = {"two_halves_got": shared, "third_waited": third_waited, "third_got_after_one_left": third,
           "third_start_after_kill_s": round(time.perf_counter() - t1, 3), "total_s": round(time.perf_counter() - t0, 2),
           "ok": shared == [[0], [0]] and third_waited and third == [0]}
    for h in (b, c):
        phalanx.kill(h)
    return out


def hardware(nbytes):
    dev = torch.empty(nbytes // 4, dtype=torch.float32, device=DEVICE)
    pinned = torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=DEVICE == "cuda")
    pageable = torch.empty(nbytes // 4, dtype=torch.float32)
    other = torch.empty_like(dev)
    return {
        "pinned_d2h_gbps": gbps(nbytes, timed(lambda: pinned.copy_(dev, non_blocking=True), 5)),
        "pinned_h2d_gbps": gbps(nbytes, timed(lambda: dev.copy_(pinned, non_blocking=True), 5)),
        "pageable_d2h_gbps": gbps(nbytes, timed(lambda: pageable.copy_(dev), 3)),
        "d2d_gbps": gbps(nbytes, timed(lambda: other.copy_(dev), 5)),
    }


@contextlib.contextmanager
def staged_only():
    """CUDA tensors only staged through the store while inside (GPU objects off in this process)."""
    from phalanx._private import gpu_objects
    api = gpu_objects.device()
    gpu_objects.use_device(None)
    try:
        yield
    finally:
        gpu_objects.use_device(api)


def put_get(nbytes):
    """Figures 1 and 2: the staged path (a put into the store, a get from it onto the GPU), then a put
    that keeps a GPU object too (staged, plus one device copy) and the producer's own get of it."""
    t = torch.arange(nbytes // 4, dtype=torch.float32, device=DEVICE)
    refs = []

    def put():
        refs[:] = refs[-1:] + [phalanx.put(t)]  # (the one before last is freed: its pages are used again)

    with staged_only():
        first_s = timed(put, 1)  # (its segments of the store are registered with CUDA on the way)
        put_s = timed(put, 5)
        ref = refs[-1]
        back = []
        get_s = timed(lambda: back.append(phalanx.get(ref)), 3)
        ok = back[-1].device.type == DEVICE and torch.equal(back[-1], t)
        host_s = timed(lambda: phalanx.get(ref, device="cpu"), 3)
        del back, ref
    refs.clear()
    gpu_put_s = timed(put, 5)
    own = []
    own_get_s = timed(lambda: own.append(phalanx.get(refs[-1])), 3)
    ok = ok and torch.equal(own[-1], t)
    del own
    refs.clear()
    hw = hardware(nbytes)
    put_gbps, get_gbps = gbps(nbytes, put_s), gbps(nbytes, get_s)
    return {"first_put_gbps": gbps(nbytes, first_s), "put_gbps": put_gbps, "get_to_gpu_gbps": get_gbps,
            "get_to_cpu_gbps": gbps(nbytes, host_s), "bytes_equal": bool(ok),
            "gpu_object_put_gbps": gbps(nbytes, gpu_put_s), "gpu_object_own_get_ms": round(own_get_s * 1000, 3),
            "pinned_d2h_gbps": hw["pinned_d2h_gbps"], "pinned_h2d_gbps": hw["pinned_h2d_gbps"],
            # issue 38's figures 1 and 2: each >= 0.8
            "put_vs_pinned_d2h": round(put_gbps / hw["pinned_d2h_gbps"], 3),
            "gpu_object_put_vs_pinned_d2h": round(gbps(nbytes, gpu_put_s) / hw["pinned_d2h_gbps"], 3),
            "get_vs_pinned_h2d": round(get_gbps / hw["pinned_h2d_gbps"], 3)}


@phalanx.remote(num_gpus=0.5)
class HalfProducer:
    """A GPU process of half the GPU that makes GPU objects (issue 38's figures 3 to 5)."""

    def make(self, nbytes, value=1.0):
        import torch as th
        return th.full((nbytes // 4,), value, dtype=th.float32, device=DEVICE)

    def kept(self):
        from phalanx._private import gpu_objects
        return gpu_objects.holder().num_kept() if gpu_objects.device() else 0

    def node(self):
        return phalanx.get_node_id()


def gpu_object_same_gpu(sizes):
    """Figure 3: another process on the same GPU returns it, the driver maps it (no copy)."""
    from phalanx._private import gpu_objects
    p = HalfProducer.remote()
    out = {"ok": True}
    for nbytes in sizes:
        times = []
        for k in range(3):
            ref = p.make.remote(nbytes, float(k))
            seconds, v = timed_get(ref)
            times.append(seconds)
            equal = bool((v == float(k)).all()) and v.device.type == DEVICE
            out["ok"] = out["ok"] and equal
            del v, ref
        ms = statistics.median(times) * 1000
        out[f"get_ms_{nbytes // MiB}mib"] = round(ms, 3)
        out["ok"] = out["ok"] and ms <= 1.0  # (issue 38: <= 1 ms at 1 GiB; O(1) in size)
    out["mapped_open_now"] = gpu_objects.mappings().num_open() if gpu_objects.device() else None
    out["last_error"] = gpu_objects.last_error
    first, last = out[f"get_ms_{sizes[0] // MiB}mib"], out[f"get_ms_{sizes[-1] // MiB}mib"]
    out["largest_over_smallest"] = round(last / max(1e-9, first), 2)  # ~1: O(1) in size
    phalanx.kill(p)
    return out


def gpu_reduce_8x64():
    """Figure 5: a reduce of 8 x 64 MiB CUDA gradients made by GPU actors, beside torch's sum of them."""
    ps = [HalfProducer.remote(), HalfProducer.remote()]
    n = 64 * MiB
    refs = [ps[k % 2].make.remote(n, float(k + 1)) for k in range(8)]
    phalanx.wait(refs, num_returns=8, timeout=120)
    xs = phalanx.get(refs, timeout=120)  # (mapped: the same memory the reduce reads)
    sync()
    torch_s = timed(lambda: torch.stack(xs).sum(0), 5)
    reduce_times = []
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        total = phalanx.get(phalanx.collective.reduce(refs, timeout=120), timeout=120)
        sync()
        reduce_times.append(time.perf_counter() - t0)
    reduce_s = statistics.median(reduce_times)
    want = float(sum(range(1, 9)))
    ok = bool((total == want).all()) and total.device.type == DEVICE
    for p in ps:
        phalanx.kill(p)
    return {"reduce_ms": round(reduce_s * 1000, 3), "torch_stack_sum_ms": round(torch_s * 1000, 3),
            "reduce_vs_torch": round(reduce_s / torch_s, 2), "result_equal": ok, "ok": ok and reduce_s <= 2 * torch_s}


def loopback_tcp_gbps(nbytes):
    """One TCP stream over loopback, Python sockets (the wire two raylets on the machine share)."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    chunk = bytearray(16 * MiB)

    def send():
        c = socket.create_connection(srv.getsockname())
        left = nbytes
        while left > 0:
            c.sendall(memoryview(chunk)[:min(left, len(chunk))])
            left -= len(chunk)
        c.close()

    got = bytearray(16 * MiB)
    t = threading.Thread(target=send)
    conn_t0 = time.perf_counter()
    t.start()
    conn, _ = srv.accept()
    received = 0
    while received < nbytes:
        k = conn.recv_into(got)
        if not k:
            break
        received += k
    seconds = time.perf_counter() - conn_t0
    t.join()
    conn.close()
    srv.close()
    return gbps(received, seconds)


TWO_RAYLETS = """
import json, statistics, sys, time, torch, phalanx
from phalanx.util.scheduling_strategies import NodeAffinitySchedulingStrategy
nbytes = int(sys.argv[1])
phalanx.init(num_cpus=2, num_nodes=2, object_store_memory=3 << 30)
me = phalanx.get_node_id()
other = [n["NodeID"] for n in phalanx.nodes() if n["NodeID"] != me][0]

@phalanx.remote(num_gpus=0.5, scheduling_strategy=NodeAffinitySchedulingStrategy(other, soft=False))
class Far:
    def make(self, n, v):
        return torch.full((n // 4,), v, dtype=torch.float32, device="cuda")
    def node(self):
        return phalanx.get_node_id()

f = Far.remote()
assert phalanx.get(f.node.remote(), timeout=120) == other
gets, ends, ok = [], [], True
for k in range(3):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ref = f.make.remote(nbytes, float(k))
    phalanx.wait([ref], timeout=120, fetch_local=False)
    t1 = time.perf_counter()
    v = phalanx.get(ref, timeout=120)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    gets.append(t2 - t1)
    ends.append(t2 - t0)
    ok = ok and v.device.type == "cuda" and bool((v == float(k)).all())
    del v, ref
print("RESULT", json.dumps({"get_s": statistics.median(gets), "end_to_end_s": statistics.median(ends), "ok": ok}))
phalanx.shutdown()
"""


def two_raylets(nbytes, log):
    """Figure 4: two raylets on the machine, a GPU process on each: GPU -> GPU across them."""
    r = subprocess.run([sys.executable, "-c", TWO_RAYLETS, str(nbytes)], capture_output=True, text=True, timeout=240)
    log.write(f"\n== two raylets ==\n{(r.stdout + r.stderr)[-5000:]}\n")
    found = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    if r.returncode != 0 or not found:
        return {"ok": False, "error": (r.stderr.strip().splitlines() or [f"rc {r.returncode}"])[-1][-600:]}
    res = json.loads(found[-1][7:])
    hw = hardware(nbytes)
    tcp = loopback_tcp_gbps(nbytes)
    floor = min(hw["pinned_d2h_gbps"], hw["pinned_h2d_gbps"], tcp)
    get_gbps = gbps(nbytes, res["get_s"])
    return {"get_gbps": get_gbps, "end_to_end_gbps": gbps(nbytes, res["end_to_end_s"]), "loopback_tcp_gbps": tcp,
            "pinned_d2h_gbps": hw["pinned_d2h_gbps"], "pinned_h2d_gbps": hw["pinned_h2d_gbps"],
            "get_vs_lower_of_pinned_and_tcp": round(get_gbps / floor, 3), "bytes_equal": res["ok"],
            "ok": res["ok"] and get_gbps >= 0.5 * floor}


def impala_policy_ways(seconds, out_dir, log):
    """Figure 6: IMPALA with the learner on the GPU, the policy a numpy vector, then a GPU object."""
    out = {}
    for name, extra in (("numpy_policy", []), ("gpu_object_policy", ["--policy-on-device"])):
        out[name] = impala(seconds, out_dir, log, extra)
    out["ok"] = all(v.get("ok") for v in out.values() if isinstance(v, dict))
    return out


def actor_to_driver(nbytes):
    p = Producer.remote()
    phalanx.get(p.ready.remote(), timeout=120)
    times, ok = [], True
    for _ in range(3):
        seconds, v = timed_get(p.make.remote(nbytes, DEVICE))
        times.append(seconds)
        ok = ok and v.device.type == DEVICE and bool((v == 1).all())
    phalanx.kill(p)
    return {"get_gbps": gbps(nbytes, statistics.median(times)), "bytes_equal": ok}


NCCL_ONE_RANK = """
import json, time, torch, phalanx
from phalanx._private import nccl
phalanx.init(num_cpus=1, object_store_memory=1 << 28)
t0 = time.perf_counter()
phalanx.collective.init_group(1, 0, "n1", backend="nccl", timeout=30)
init_s = time.perf_counter() - t0
x = torch.arange(16 << 20, dtype=torch.float32, device="cuda")
want = x.clone()
phalanx.collective.allreduce(x, group_name="n1", timeout=60)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(10):
    phalanx.collective.allreduce(x, group_name="n1", timeout=60)
torch.cuda.synchronize()
print("RESULT", json.dumps({"init_s": round(init_s, 3), "allreduce_64mib_ms": round((time.perf_counter() - t0) * 100, 3),
                      "equal": bool(torch.equal(x, want)), "describe": nccl.describe()}))
phalanx.collective.destroy_group("n1")
phalanx.shutdown()
"""


def nccl_one_rank(log):
    """In fresh processes: NCCL reads its environment once per process."""
    out = {}
    for attempt, extra in (("default", {}), ("debug", {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV"})):
        env = dict(os.environ, **extra)
        try:
            r = subprocess.run([sys.executable, "-c", NCCL_ONE_RANK], capture_output=True, text=True, timeout=45,
                               env=env)
            text = r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            text = f"timed out after 45 s\n{_text(e.stdout)}{_text(e.stderr)}"
            r = None
        log.write(f"\n== NCCL, one rank ({attempt}) ==\n{text[-6000:]}\n")
        found = [line for line in text.splitlines() if line.startswith("RESULT ")]
        if r is not None and r.returncode == 0 and found:
            out.update(json.loads(found[-1][7:]))
            out["ok"] = out.get("equal", False)
            return out
        out[f"error_{attempt}"] = text.strip().splitlines()[-1][-600:] if text.strip() else f"rc {r and r.returncode}"
    out["ok"] = False
    return out


def impala(seconds, out_dir, log, extra=()):
    path = os.path.join(out_dir, "impala.json.tmp")
    cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "rl", "impala.py"),
           "--seconds", str(seconds), "--device", "cuda", "--json", path, "--png", ""] + list(extra)
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 90)
        log.write(f"\n== IMPALA ==\n{(r.stdout + r.stderr)[-5000:]}\n")
    except subprocess.TimeoutExpired as e:
        log.write(f"\n== IMPALA: timed out ==\n{_text(e.stdout)}{_text(e.stderr)}\n")
        return {"ok": False, "error": f"did not end within {seconds + 90} s"}
    if r.returncode != 0 or not os.path.exists(path):
        return {"ok": False, "error": (r.stderr.strip().splitlines() or ["rc %d" % r.returncode])[-1][-600:]}
    with open(path) as f:
        res = json.load(f)["results"][0]
    os.remove(path)
    return {"ok": True, "wall_s": round(time.perf_counter() - t0, 1),
            "env_steps_per_s": round(res["env_steps_per_s"], 1), "updates_per_s": round(res["updates_per_s"], 2),
            "time_to_450_s": res.get("time_to_target_s"), "final_reward": res.get("final_reward"),
            "policy_delivery_ms": round(1000 * res.get("policy_delivery_s", 0.0), 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True)
    ap.add_argument("--log", help="a log of the subprocesses (NCCL, IMPALA); default: beside --json")
    ap.add_argument("--impala-seconds", type=float, default=60)
    ap.add_argument("--quick", action="store_true", help="64 MiB only, no IMPALA (a check of the script)")
    ap.add_argument("--cpu", action="store_true", help="CPU tensors and a declared GPU: checks the script only")
    a = ap.parse_args()
    global DEVICE
    DEVICE = "cpu" if a.cpu else "cuda"
    if not a.cpu and not torch.cuda.is_available():
        print("device_figures: torch sees no CUDA device here", file=sys.stderr)
        return 2
    out_dir = os.path.dirname(os.path.abspath(a.json))
    figures = {"machine": {"gpu": torch.cuda.get_device_name(0) if not a.cpu else "none (--cpu)",
                           "torch": torch.__version__,
                           "cuda": torch.version.cuda, "python": sys.version.split()[0]}}
    sizes = [64 * MiB] if a.quick else [64 * MiB, 256 * MiB, 1024 * MiB]

    def part(name, f, *args):
        t0 = time.perf_counter()
        try:
            figures[name] = f(*args)
        except Exception as e:  # recorded; the other parts still run
            figures[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:800],
                             "traceback": traceback.format_exc()[-2000:]}
        figures[name]["seconds"] = round(time.perf_counter() - t0, 2)
        print(f"{name}: {json.dumps(figures[name])[:400]}", flush=True)
        with open(a.json, "w") as f:  # as it goes: a run stopped at its limit keeps what it had
            json.dump(figures, f, indent=1)

    with open(a.log or os.path.join(out_dir, "figures.log"), "a") as log:
        phalanx.init(num_cpus=4, object_store_memory=4 << 30, **({"num_gpus": 1} if a.cpu else {}))
        part("gpu_scheduling", gpu_scheduling)
        for n in sizes:
            part(f"hardware_{n // MiB}mib", hardware, n)
            part(f"tensor_put_get_{n // MiB}mib", put_get, n)
        part(f"actor_to_driver_{sizes[min(1, len(sizes) - 1)] // MiB}mib", actor_to_driver,
             sizes[min(1, len(sizes) - 1)])
        part("gpu_object_same_gpu", gpu_object_same_gpu, [sizes[0], sizes[-1]])
        part("gpu_reduce_8x64mib", gpu_reduce_8x64)
        phalanx.shutdown()
        if not a.cpu:
            part("nccl_world_1", nccl_one_rank, log)
            part(f"two_raylets_{sizes[-1] // MiB}mib", two_raylets, sizes[-1], log)
        if not a.quick:
            part("impala_policy_ways", impala_policy_ways, a.impala_seconds, out_dir, log)
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
