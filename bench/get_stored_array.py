"""The get of a stored array, 1 GiB and 1 MiB, measured long enough to see
past the cold start (docs/benchmarks.md, 2026-11-27 03:56): the
microbenchmark's row is the median of 10 gets right after putting 1 GiB,
when every cache is cold. Three trials of 10 gets, then 2,000 gets each,
with their 10th, 50th and 90th percentiles.

    .venv/bin/python bench/get_stored_array.py
    PHALANX_TRACE=0 .venv/bin/python bench/get_stored_array.py
"""
import statistics
import time

import numpy as np

import phalanx


def main():
    phalanx.init(num_cpus=2)
    try:
        big = phalanx.put(np.ones(1 << 28, dtype=np.float32))
        small = phalanx.put(np.ones(1 << 18, dtype=np.float32))
        for name, ref in (("1 GiB", big), ("1 MiB", small)):
            phalanx.get(ref)
            for _ in range(3):
                first = []
                for _ in range(10):
                    t = time.perf_counter()
                    phalanx.get(ref)
                    first.append((time.perf_counter() - t) * 1e6)
                many = []
                for _ in range(2000):
                    t = time.perf_counter()
                    phalanx.get(ref)
                    many.append((time.perf_counter() - t) * 1e6)
                many.sort()
                print(f"{name}: median of 10: {statistics.median(first):.2f} us; of 2,000: "
                      f"p10 {many[200]:.2f}, p50 {many[1000]:.2f}, p90 {many[1800]:.2f} us")
    finally:
        phalanx.shutdown()


if __name__ == "__main__":
    main()
