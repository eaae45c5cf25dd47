"""Spilling against the disk's own rate, in one run.

Puts objects adding up to several times the object store (so most of them go
to disk), then gets every one back (each restore spills another). Prints the
raylet's own counters (bytes written and read, and the time spent in the
writes and reads) beside what `dd` does on the same folder with the same 8
MiB blocks (dd_rates says which runs). Neither side flushes to the device:
spill files are scratch, lost with the raylet anyway.

    .venv/bin/python bench/spill.py [--store-mib 512] [--object-mib 64] [--factor 3] [--json out.json]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import phalanx


def dd(args):
    """dd's own rate in GB/s (it prints 'N bytes ... copied, T s, R GB/s')."""
    out = subprocess.run(["dd", *args], capture_output=True, text=True, check=True).stderr
    m = re.search(r"(\d+) bytes.*copied, ([\d.]+) s", out)
    return int(m.group(1)) / float(m.group(2)) / 1e9


def dd_rates(folder, total_mib, rounds=3):
    """dd on the same folder, 8 MiB blocks, median of `rounds`: copying a file
    of random bytes that is in the page cache to a new file (what a spill does:
    resident bytes to a new file), the same from /dev/zero, with fdatasync, and
    reading the cached file back."""
    src, dst = os.path.join(folder, "dd-src.bin"), os.path.join(folder, "dd-dst.bin")
    count = str(max(1, total_mib // 8))
    out = {"dd copy (cached file to new file) GB/s": [], "dd write from /dev/zero GB/s": [],
           "dd write + fdatasync GB/s": [], "dd read (cached) GB/s": []}
    try:
        subprocess.run(["dd", "if=/dev/urandom", f"of={src}", "bs=8M", f"count={count}"], capture_output=True,
                       check=True)
        for _ in range(rounds):
            for key, args in (("dd copy (cached file to new file) GB/s", [f"if={src}", f"of={dst}", "bs=8M"]),
                              ("dd write from /dev/zero GB/s", ["if=/dev/zero", f"of={dst}", "bs=8M", f"count={count}"]),
                              ("dd write + fdatasync GB/s",
                               ["if=/dev/zero", f"of={dst}", "bs=8M", f"count={count}", "conv=fdatasync"]),
                              ("dd read (cached) GB/s", [f"if={src}", "of=/dev/null", "bs=8M"])):
                out[key].append(dd(args))
                if os.path.exists(dst):
                    os.remove(dst)
    finally:
        for p in (src, dst):
            if os.path.exists(p):
                os.remove(p)
    return {k: sorted(v)[len(v) // 2] for k, v in out.items()}


def phalanx_round(a, folder, n):
    """One cluster: n puts (most go to disk), then every get (each restore spills another)."""
    try:
        phalanx.init(num_cpus=1, object_store_memory=a.store_mib << 20, _system_config={"spill_dir": folder})
        t0 = time.perf_counter()
        refs = [phalanx.put(np.full(a.object_mib << 18, i, dtype=np.float32)) for i in range(n)]
        put_s = time.perf_counter() - t0
        spilled_putting = phalanx.cluster_stats()["spilled_total_objects"]
        t0 = time.perf_counter()
        for i, r in enumerate(refs):
            v = phalanx.get(r, timeout=120)
            assert v[0] == i and v[-1] == i, f"object {i} came back wrong"
            del v
        get_s = time.perf_counter() - t0
        s = phalanx.cluster_stats()
        del refs, r
    finally:
        phalanx.shutdown()
    total = n * (a.object_mib << 20) / 1e9
    return {"spilled while putting": spilled_putting, "spilled in all": s["spilled_total_objects"],
            "restored in all": s["restored_total_objects"],
            "spill write GB/s": s["spilled_total_bytes"] / s["spill_seconds"] / 1e9,
            "restore read GB/s": s["restored_total_bytes"] / s["restore_seconds"] / 1e9,
            "puts end to end GB/s": total / put_s, "gets end to end GB/s": total / get_s}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store-mib", type=int, default=512)
    ap.add_argument("--object-mib", type=int, default=64)
    ap.add_argument("--factor", type=float, default=3.0, help="objects put, as a multiple of the store")
    ap.add_argument("--rounds", type=int, default=3, help="phalanx and dd alternate this many times (medians)")
    ap.add_argument("--json")
    a = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="phalanx-spill-bench-")
    n = int(a.factor * a.store_mib / a.object_mib)
    rounds = []
    try:
        for k in range(a.rounds):  # alternated: the page cache's state moves both alike
            r = phalanx_round(a, folder, n)
            r.update(dd_rates(folder, min(n * a.object_mib, 1024), rounds=1))
            rounds.append(r)
            print(f"round {k + 1}: spill {r['spill write GB/s']:.2f} GB/s, dd copy "
                  f"{r['dd copy (cached file to new file) GB/s']:.2f}; restore {r['restore read GB/s']:.2f}, "
                  f"dd read {r['dd read (cached) GB/s']:.2f}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out = {"store MiB": a.store_mib, "object MiB": a.object_mib, "objects": n, "put total MiB": n * a.object_mib,
           "rounds": a.rounds}
    for key in rounds[0]:
        vals = sorted(r[key] for r in rounds)
        out[key] = vals[len(vals) // 2]
    out["spill write / dd copy"] = out["spill write GB/s"] / out["dd copy (cached file to new file) GB/s"]
    out["restore read / dd read"] = out["restore read GB/s"] / out["dd read (cached) GB/s"]
    out["each round"] = rounds
    print("medians:")
    for k, v in out.items():
        if k != "each round":
            print(f"  {k:40s} {v:.3f}" if isinstance(v, float) else f"  {k:40s} {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
