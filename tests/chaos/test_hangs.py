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


@pytest.fixture
def stuck_log(fresh_cluster, monkeypatch):
    """A cluster whose calls report after 1 s of waiting, and the warnings they log."""
    monkeypatch.setenv("PHALANX_STUCK_REPORT_S", "1")  # (read at init)
    fresh_cluster()
    catch = _Catch()
    logging.getLogger("phalanx").addHandler(catch)
    try:
        yield catch
    finally:
        logging.getLogger("phalanx").removeHandler(catch)


def test_a_blocked_get_reports_once_what_it_waits_for(stuck_log):
    catch = stuck_log
    ref = sleepy_in_a_named_place.remote(2.5)
    assert phalanx.get(ref, timeout=30) == 2.5  # the wait goes on after the report
    reports = [m for m in catch.records if "has waited" in m]
    with pytest.raises(phalanx.exceptions.GetTimeoutError, match="after 1.5 s"):
        phalanx.get(sleepy_in_a_named_place.remote(30), timeout=1.5)  # (the report, then the timeout asked)
    assert len(reports) == 1, catch.records
    assert "phalanx.get has waited 1 s for 1 of 1 objects" in reports[0]
    assert ref.hex()[:12] in reports[0] and "has not finished" in reports[0], reports[0]


@phalanx.remote(num_returns="streaming")
def slow_stream(seconds):
    time.sleep(seconds)
    yield seconds


@phalanx.remote
class LateRank:
    """Rank 1 of a two-rank group whose rank 0 is the driver: it comes late."""

    def join(self, group):
        phalanx.collective.init_group(2, 1, group, timeout=60)

    def barrier_after(self, group, seconds):
        time.sleep(seconds)
        phalanx.collective.barrier(group_name=group, timeout=60)
        return "passed"


def test_a_blocked_wait_generator_and_group_call_each_report_once(stuck_log):
    catch = stuck_log
    ref = sleepy_in_a_named_place.remote(2.5)
    ready, _ = phalanx.wait([ref], timeout=30)  # the wait goes on after the report
    assert ready == [ref]
    gen = slow_stream.remote(2.5)
    assert phalanx.get(next(gen), timeout=30) == 2.5
    late = LateRank.remote()
    joined = late.join.remote("late")
    phalanx.collective.init_group(2, 0, "late", timeout=60)
    phalanx.get(joined, timeout=30)
    other = late.barrier_after.remote("late", 2.5)
    phalanx.collective.barrier(group_name="late", timeout=60)
    assert phalanx.get(other, timeout=30) == "passed"
    phalanx.collective.destroy_group("late")
    reports = [m for m in catch.records if "has waited" in m]
    assert len(reports) == 3, catch.records
    assert "phalanx.wait (num_returns=1) has waited 1 s for 1 of 1 objects" in reports[0], reports[0]
    assert ref.hex()[:12] in reports[0] and "has not finished" in reports[0], reports[0]
    assert "a generator's next() has waited 1 s for its item 0" in reports[1], reports[1]
    assert "has not finished" in reports[1], reports[1]
    assert "group 'late' barrier" in reports[2] and "on rank 0 has waited 1 s" in reports[2], reports[2]
    assert "it waits for rank 1 (pid " in reports[2], reports[2]


def test_phalanx_stack_prints_every_worker_and_driver_stack(fresh_cluster):
    info = fresh_cluster()
    ref = sleepy_in_a_named_place.remote(8)
    time.sleep(1.0)
    p = subprocess.run([sys.executable, "-m", "phalanx.scripts", "stack", "--address", info["gcs_address"]],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    assert "sleepy_in_a_named_place" in p.stdout, p.stdout
    assert "workers and 1 drivers on this machine" in p.stdout and "most recent call first" in p.stdout
    # this driver's own stack too: its main thread waits in subprocess.run, in this test
    driver = p.stdout[p.stdout.index(f"== driver pid {os.getpid()}"):]
    assert "test_phalanx_stack_prints_every_worker_and_driver_stack" in driver, p.stdout
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
