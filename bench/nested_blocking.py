"""Nested blocking tasks on few CPUs: N parents, each submitting a child and blocking in get on it, on a
node of --cpus CPUs (issue 36; Ray's own figure: 1,000 on 1 CPU in about 10 s). A parent blocked in get
lends its CPU back; what decides the time is whether the node serves the children a blocked parent waits
for or starts yet another parent (each taking a worker of its own). Prints the time, the workers the node
started, and with --ray the same on Ray.

    .venv/bin/python bench/nested_blocking.py [--n 1000] [--cpus 1] [--ray]"""
import argparse
import json
import os
import time


def run(ray, n, cpus, timeout):
    ray.init(num_cpus=cpus)

    @ray.remote
    def child(i):
        return i

    @ray.remote
    def parent(i):
        return ray.get(child.remote(i)) + os.getpid() * 0  # (os: where it ran is not the question)

    @ray.remote
    def pid():
        return os.getpid()

    ray.get(pid.remote())  # a worker up before timing
    t0 = time.perf_counter()
    refs = [parent.remote(i) for i in range(n)]
    try:
        out = ray.get(refs, timeout=timeout)
        ok = out == list(range(n))
    except Exception as e:  # a timeout: say how far it got
        ready, _ = ray.wait(refs, num_returns=n, timeout=0)
        print(f"  {type(e).__name__}: {len(ready)} of {n} done in {timeout} s")
        ok = False
    took = time.perf_counter() - t0
    ray.shutdown()
    return {"n": n, "cpus": cpus, "seconds": round(took, 2), "ok": ok}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--ray", action="store_true", help="also on Ray (scripts/bench.sh installs it)")
    ap.add_argument("--json")
    a = ap.parse_args()
    import phalanx
    results = {"phalanx": run(phalanx, a.n, a.cpus, a.timeout)}
    print("phalanx", results["phalanx"])
    if a.ray:
        import ray
        results["ray"] = run(ray, a.n, a.cpus, a.timeout)
        print("ray", results["ray"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
