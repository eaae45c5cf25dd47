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
    kwargs.setdefault("address", "local")  # (a new cluster: init() with no address joins one running here)
    if TARGET != "ray":
        kwargs.pop("_system_config", None)  # Ray's own knobs (phalanx's init takes its own, not these)
    return _init(**kwargs)


def _param(request):
    """A fixture's parameters (`@pytest.mark.parametrize("ray_start_regular", [{...}], indirect=True)`)."""
    return dict(getattr(request, "param", None) or {})


def _start_cluster(request, **defaults):
    """Ray's `_ray_start_cluster`: a Cluster; with `num_nodes`, that many nodes (the other parameters their
    add_node keywords, num_cpus=1 by default) and, unless `do_init=False`, this driver connected to the head;
    without, no node yet. Ray's `_system_config` knobs are Ray's own: given to Ray only."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    param = dict(defaults, **_param(request))
    num_nodes = param.pop("num_nodes", 0)
    do_init = param.pop("do_init", num_nodes > 0)
    if TARGET != "ray":
        param.pop("_system_config", None)
    param.setdefault("num_cpus", 1)
    cluster = Cluster()
    for i in range(num_nodes):
        if i > 0:
            param.pop("_system_config", None)
        cluster.add_node(**param)
        if i == 0 and do_init:
            ray.init(address=cluster.address)
    if num_nodes:
        cluster.wait_for_nodes()
    return cluster


@pytest.fixture
def ray_start_cluster(request):
    """Ray's fixture of this name: a cluster of nodes on this machine (ray.cluster_utils.Cluster; with no
    `num_nodes` parameter none yet, the first added is the head); it and the driver are shut down afterwards."""
    cluster = _start_cluster(request)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


ray_start_cluster_enabled = ray_start_cluster


@pytest.fixture
def ray_start_cluster_head(request):
    """Ray's fixture of this name: a Cluster of one node, this driver connected."""
    cluster = _start_cluster(request, num_nodes=1, do_init=True)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def ray_start_cluster_2_nodes(request):
    """Ray's fixture of this name: a Cluster of two nodes, this driver connected."""
    cluster = _start_cluster(request, num_nodes=2, do_init=True)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def ray_start_regular_shared():
    yield _fresh(num_cpus=4)
    ray.shutdown()


@pytest.fixture
def ray_start_regular(request):
    """Ray's fixture of this name, its parameters ray.init keywords (1 CPU unless they say)."""
    yield _fresh(**_param(request))
    ray.shutdown()


@pytest.fixture
def ray_start_no_cpu(request):
    yield _fresh(**dict(_param(request), num_cpus=0))
    ray.shutdown()


@pytest.fixture
def ray_start_2_cpus(request):
    yield _fresh(**dict(_param(request), num_cpus=2))
    ray.shutdown()


@pytest.fixture
def ray_start_10_cpus(request):
    yield _fresh(**dict(_param(request), num_cpus=10))
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
