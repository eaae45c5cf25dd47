"""Ray's tests, written once, run on phalanx (default) or on Ray itself (RAY_SUITE_TARGET=ray).

Each file here follows one of ray-project/ray's `python/ray/tests/` files: the test names are Ray's, each
test checks the behaviour Ray's test of that name checks, through `import ray` only (no `ray._private`,
no phalanx internals), so the same file scores both systems. `bench/ray_suite.py` runs it on both and
prints the scores and the differences. The fixtures are Ray's, by name:

- `ray_start_regular_shared`: one cluster for the module (Ray's default for tests that do not break it);
- `ray_start_regular`, `ray_start_2_cpus`, ...: a cluster of the test's own;
- `shutdown_only`: the test calls `ray.init` itself; the cluster is shut down afterwards."""
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.environ.get("RAY_SUITE_TARGET", "phalanx")
if TARGET not in ("phalanx", "ray"):
    raise RuntimeError(f"RAY_SUITE_TARGET is {TARGET!r}: phalanx or ray")


def _prepend_path(path):
    """On this process's path and on the workers' (they inherit the driver's PYTHONPATH)."""
    if path not in sys.path:
        sys.path.insert(0, path)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if path not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([path] + parts)


if TARGET == "phalanx":
    _prepend_path(os.path.join(HERE, "as_ray"))
_prepend_path(HERE)  # suite_utils
_prepend_path(os.path.dirname(HERE))  # ray_suite.test_*: helpers of a test module, pickled by reference

import ray  # noqa: E402  (the path above decides which)


def pytest_report_header(config):
    return f"ray suite target: {TARGET} ({ray.__name__} {getattr(ray, '__version__', '?')})"


def _init(**kwargs):
    if TARGET == "ray":
        kwargs.setdefault("include_dashboard", False)
    return ray.init(**kwargs)


def _fresh(**kwargs):
    if ray.is_initialized():
        ray.shutdown()
    kwargs.setdefault("num_cpus", 1)
    return _init(**kwargs)


@pytest.fixture
def ray_start_cluster():
    """Ray's fixture of this name: a cluster of nodes on this machine (ray.cluster_utils.Cluster; none yet, the
    first added is the head); it and the driver are shut down afterwards."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def ray_start_regular_shared():
    yield _fresh(num_cpus=4)
    ray.shutdown()


@pytest.fixture
def ray_start_regular():
    yield _fresh(num_cpus=1)
    ray.shutdown()


@pytest.fixture
def ray_start_2_cpus():
    yield _fresh(num_cpus=2)
    ray.shutdown()


@pytest.fixture
def ray_start_10_cpus():
    yield _fresh(num_cpus=10)
    ray.shutdown()


@pytest.fixture
def shutdown_only():
    if ray.is_initialized():
        ray.shutdown()
    yield None
    ray.shutdown()


@pytest.fixture
def init_kwargs():
    """ray.init's keywords the target needs beside the test's own (Ray: no dashboard here)."""
    return {"include_dashboard": False} if TARGET == "ray" else {}
