"""1:1 actor calls alone, for A/B runs of two builds on a noisy machine: the
median of three 2-second windows of async calls (1,000 in flight) and of sync
calls (one at a time), on an embedded 2-CPU cluster.

    .venv/bin/python bench/actor_calls.py new
    PYTHONPATH=/tmp/old_site .venv/bin/python bench/actor_calls.py old   # a tree installed with pip --target

Alternate the two a few times and compare medians (docs/benchmarks.md)."""
import sys
import time

import phalanx


@phalanx.remote
class Echo:
    def ping(self):
        return 0


def rate(fn, seconds=2.0):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += fn()
    return n / (time.perf_counter() - t0)


def main():
    label = sys.argv[1] if len(sys.argv) > 1 else "phalanx"
    phalanx.init(num_cpus=2)
    a = Echo.remote()
    phalanx.get(a.ping.remote())

    def batch():
        phalanx.get([a.ping.remote() for _ in range(1000)])
        return 1000

    def one():
        phalanx.get(a.ping.remote())
        return 1

    rate(batch, 1.0)  # warm-up
    async_rate = sorted(rate(batch) for _ in range(3))[1]
    sync_rate = sorted(rate(one) for _ in range(3))[1]
    print(f"{label} async {async_rate:.0f} sync {sync_rate:.0f} calls/s", flush=True)
    phalanx.shutdown()


if __name__ == "__main__":
    main()
