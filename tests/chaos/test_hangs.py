"""No hangs, and a way to see what is stuck (docs/fault-tolerance.md): a get
blocked past the report threshold logs once what it waits for; `phalanx
stack` prints the Python stack of every worker; waits on a process that dies
end with an error naming it."""
import logging
import os
import subprocess
import sys
import time

import pytest

import phalanx
from phalanx.exceptions import ActorDiedError, WorkerCrashedError

from .util import kill9, wait_until


@phalanx.remote
def sleepy_in_a_named_place(seconds):
    time.sleep(seconds)
    return seconds


@phalanx.remote(max_retries=0)
def pid_then_sleep(path, seconds):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)


@phalanx.remote
class Holder:
    def pid(self):
        return os.getpid()

    def wait_forever(self):
        time.sleep(3600)


class _Catch(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def test_a_blocked_get_reports_once_what_it_waits_for(fresh_cluster, monkeypatch):
    monkeypatch.setenv("PHALANX_STUCK_REPORT_S", "1")  # (read at init)
    fresh_cluster()
    catch = _Catch()
    logging.getLogger("phalanx").addHandler(catch)
    try:
        ref = sleepy_in_a_named_place.remote(2.5)
        assert phalanx.get(ref, timeout=30) == 2.5  # the wait goes on after the report
        reports = [m for m in catch.records if "has waited" in m]
        with pytest.raises(phalanx.exceptions.GetTimeoutError, match="after 1.5 s"):
            phalanx.get(sleepy_in_a_named_place.remote(30), timeout=1.5)  # (the report, then the timeout asked)
    finally:
        logging.getLogger("phalanx").removeHandler(catch)
    assert len(reports) == 1, catch.records
    assert "phalanx.get has waited 1 s for 1 of 1 objects" in reports[0]
    assert ref.hex()[:12] in reports[0] and "has not finished" in reports[0], reports[0]


def test_phalanx_stack_prints_every_worker_stack(fresh_cluster):
    info = fresh_cluster()
    ref = sleepy_in_a_named_place.remote(8)
    time.sleep(1.0)
    p = subprocess.run([sys.executable, "-m", "phalanx.scripts", "stack", "--address", info["gcs_address"]],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    assert "sleepy_in_a_named_place" in p.stdout, p.stdout
    assert "workers on this machine" in p.stdout and "most recent call first" in p.stdout
    phalanx.cancel(ref, force=True)


def test_waits_on_a_process_that_dies_end_with_an_error_naming_it(fresh_cluster, tmp_path):
    fresh_cluster()
    # A task's worker killed mid-task, no retries: the get ends, naming the crash.
    path = str(tmp_path / "pid")
    ref = pid_then_sleep.remote(path, 60)
    wait_until(lambda: os.path.exists(path) and open(path).read(), timeout=30, what="the task to start")
    t0 = time.monotonic()
    kill9(int(open(path).read()))
    with pytest.raises(WorkerCrashedError) as e:
        phalanx.get(ref, timeout=30)
    assert "pid_then_sleep" in str(e.value), str(e.value)
    # An actor killed with a call in flight: the get ends with ActorDiedError.
    a = Holder.options(max_restarts=0).remote()
    actor_pid = phalanx.get(a.pid.remote(), timeout=30)
    call = a.wait_forever.remote()
    time.sleep(0.3)
    kill9(actor_pid)
    with pytest.raises(ActorDiedError):
        phalanx.get(call, timeout=30)
    assert time.monotonic() - t0 < 30
