"""Helpers Ray's tests import from ray's private test utilities, written here for both targets, and the
small actors several of the suite's files use."""
import asyncio
import time

import ray


@ray.remote(num_cpus=0)
class Gate:
    """Opened once by the test; tasks poll is_open() (a stand-in for Ray's SignalActor where polling fits)."""

    def __init__(self):
        self.opened = False

    def open(self):
        self.opened = True

    def is_open(self):
        return self.opened


@ray.remote(num_cpus=0)
class Signal:
    """Ray's SignalActor test helper (ray._common.test_utils), written here: wait() returns (None) once
    send() was called."""

    def __init__(self):
        self.event = asyncio.Event()

    def send(self):
        self.event.set()

    async def wait(self):
        await self.event.wait()


@ray.remote(num_cpus=0)
class Counter:
    """inc() returns how many times it was called: tests count runs and retries with it."""

    def __init__(self):
        self.n = 0

    def inc(self):
        self.n += 1
        return self.n


def wait_for_condition(predicate, timeout=10, retry_interval_ms=50, **kwargs):
    """Ray's test helper of this name (ray._common.test_utils), written here: polls until true."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if predicate(**kwargs):
                return
        except Exception as e:  # noqa: BLE001 - reported below if it never turns true
            last = e
        time.sleep(retry_interval_ms / 1000)
    raise RuntimeError(f"condition not met in {timeout} s" + (f" (last error: {last!r})" if last else ""))


def run_string_as_driver(driver_script, env=None, encode="utf-8", timeout=120):
    """Ray's test helper of this name (ray._private.test_utils), written here: runs `driver_script` as a second
    driver (a Python process of its own, `import ray` resolving as in this one: it inherits PYTHONPATH) and
    returns what it printed (stdout and stderr); a failing script raises CalledProcessError, as Ray's."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-"], input=driver_script.encode(encode), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=os.environ.copy() if env is None else env,
                          timeout=timeout)
    out = proc.stdout.decode(encode)
    if proc.returncode:
        print(out)
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out)
    return out


def phalanx_differs(reason, strict=True, run=True):
    """Marks a test that passes on Ray and not (or not always: strict=False) on phalanx; each use is a
    difference listed in docs/ray_compat.md. On Ray the test runs as any other. run=False: on phalanx the
    test is not run at all (one that would only end after a long wait there)."""
    import os

    import pytest
    return pytest.mark.xfail(os.environ.get("RAY_SUITE_TARGET", "phalanx") == "phalanx", reason=reason,
                             strict=strict, run=run)


def wait_for_pid_to_exit(pid, timeout=20):
    """Ray's test helper of this name (ray._private.test_utils), written here: waits until process `pid` is
    gone (a zombie counts as gone, as in Ray's), else TimeoutError."""
    import os

    def alive():
        if os.path.isdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:
                return False
        try:  # no /proc (macOS): signal 0 tells whether it exists
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return
        time.sleep(0.1)
    raise TimeoutError(f"Timed out while waiting for process {pid} to exit.")
