"""The phalanx demo: remote functions, refs as arguments, a 200 MB numpy
array through shared memory, wait, and what an error looks like.

    bash scripts/demo.sh        # installs, builds and runs this
"""
import time

import numpy as np

import phalanx


@phalanx.remote
def square(x):
    return x * x


@phalanx.remote(num_returns=2, max_retries=2)
def split(a):
    return a[: len(a) // 2], a[len(a) // 2:]


@phalanx.remote
def total(a):
    return float(a.sum())


@phalanx.remote
def divide(a, b):
    return a / b


def main():
    t0 = time.perf_counter()
    info = phalanx.init()  # embedded: starts redis-server and one raylet here
    print(f"cluster up in {time.perf_counter() - t0:.2f} s; logs in {info['session_dir']}")

    t = time.perf_counter()
    refs = [square.remote(i) for i in range(1000)]
    assert phalanx.get(refs) == [i * i for i in range(1000)]
    print(f"1000 tasks in {time.perf_counter() - t:.3f} s")

    t = time.perf_counter()
    big = phalanx.put(np.ones(50_000_000, dtype=np.float32))  # 200 MB
    print(f"put 200 MB in {time.perf_counter() - t:.3f} s")
    left, right = split.remote(big)  # a ref as an argument
    ready, not_ready = phalanx.wait([left, right], num_returns=1, timeout=10)
    print(f"wait: {len(ready)} ready, {len(not_ready)} not ready yet")
    sums = phalanx.get([total.remote(left), total.remote(right)])
    print(f"halves sum to {sums} (expected 25000000.0 each)")

    t = time.perf_counter()
    view = phalanx.get(big)
    print(f"get 200 MB in {(time.perf_counter() - t) * 1e3:.2f} ms: a read-only view on shared memory "
          f"(writeable={view.flags.writeable})")

    try:
        phalanx.get(divide.remote(1, 0))
    except phalanx.TaskError as e:
        print(f"a remote error arrives with its traceback, still a {type(e.cause).__name__}:")
        print("    " + str(e).splitlines()[-1])

    phalanx.shutdown()
    print("done")


if __name__ == "__main__":
    main()
