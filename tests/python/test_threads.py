"""Workers limit their math libraries' threads to their CPU allocation
(scheduler/worker_pool.cc, python/phalanx/_private/worker.py): without it,
a node running a worker per core runs cores x cores BLAS/OpenMP threads.
Checked with what a task sees: the environment variables (what libraries
loaded later read, and child processes inherit) and threadpoolctl's view of
the thread pools numpy's BLAS actually has."""
import os
import subprocess
import sys

import cloudpickle
import numpy as np

import phalanx

# The remote functions below call a helper of this module: workers get the
# module's functions by value (they cannot import a test module).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _seen():
    from threadpoolctl import threadpool_info
    np.dot(np.ones((64, 64)), np.ones((64, 64)))  # (the BLAS is loaded and used)
    pools = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    return {v: os.environ.get(v) for v in THREAD_VARS}, pools


@phalanx.remote
def default_task():
    return _seen()


@phalanx.remote(num_cpus=2)
def two_cpu_task():
    return _seen()


@phalanx.remote(num_cpus=2)
class TwoCpuActor:
    def seen(self):
        return _seen()


def _blas_threads(pools):
    """The BLAS pools' thread counts (numpy's wheels bundle OpenBLAS; MKL or BLIS builds count too)."""
    counts = {n for api, n in pools.items() if api in ("openblas", "mkl", "blis")}
    assert counts, f"threadpoolctl sees no BLAS in the worker: {pools}"
    return counts


def test_a_task_gets_as_many_threads_as_cpus_and_the_next_one_its_own(cluster):
    env, pools = phalanx.get(default_task.remote(), timeout=60)
    assert env == {v: "1" for v in THREAD_VARS}
    assert _blas_threads(pools) == {1}, pools
    env, pools = phalanx.get(two_cpu_task.remote(), timeout=60)
    assert env == {v: "2" for v in THREAD_VARS}
    assert _blas_threads(pools) == {2}, pools
    # Both CPUs of this 2-CPU node were the last task's; a default task after it
    # (on whichever worker) is back to one.
    for _ in range(3):
        env, pools = phalanx.get(default_task.remote(), timeout=60)
        assert env["OMP_NUM_THREADS"] == "1" and _blas_threads(pools) == {1}, (env, pools)


def test_an_actor_keeps_its_creations_cpus_for_its_calls(cluster):
    a = TwoCpuActor.remote()
    for _ in range(2):
        env, pools = phalanx.get(a.seen.remote(), timeout=60)
        assert env == {v: "2" for v in THREAD_VARS}
        assert _blas_threads(pools) == {2}, pools
    phalanx.kill(a)


def test_a_limit_the_user_set_is_left_alone(tmp_path):
    script = ("import os, phalanx\n"
              "phalanx.init(num_cpus=1)\n"
              "@phalanx.remote(num_cpus=1)\n"
              "def f():\n"
              "    return os.environ.get('OMP_NUM_THREADS'), os.environ.get('PHALANX_THREADS')\n"
              "print(phalanx.get(f.remote(), timeout=60))\n"
              "phalanx.shutdown()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "3"}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "('3', None)"
