"""Fixtures: every test talks to a real redis-server and a real raylet,
started on free ports by phalanx.init() and stopped afterwards."""
import os
import time

import pytest

import phalanx


_shared = {}


@pytest.fixture
def cluster():
    """An embedded cluster (2 CPUs, 1 GiB store) shared by consecutive tests;
    started again after a test that needed one of its own."""
    if not phalanx.is_initialized():
        _shared["info"] = phalanx.init(num_cpus=2, object_store_memory=1 << 30)
    return _shared["info"]


@pytest.fixture
def fresh_cluster():
    """A cluster of its own, for tests that break or exhaust it."""
    phalanx.shutdown()

    def start(**kwargs):
        kwargs.setdefault("num_cpus", 2)
        return phalanx.init(**kwargs)

    yield start
    phalanx.shutdown()


def pytest_sessionfinish(session, exitstatus):
    phalanx.shutdown()


def wait_until(pred, timeout=30.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def proc_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def node_procs():
    """{name: Popen} of the embedded cluster's processes."""
    from phalanx._private import state
    return {name: p for name, p in state.node.procs}
