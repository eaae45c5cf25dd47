"""What users see when things go wrong: each error is raised where it
belongs, names what failed, and nothing hangs."""
import os
import re
import signal
import threading
import time

import numpy as np
import pytest

import phalanx
from conftest import node_procs


@phalanx.remote
def fails(x):
    raise ValueError(f"bad value {x}")


@phalanx.remote
def echo(x):
    return x


def test_task_exception_reaches_caller_with_traceback(cluster):
    with pytest.raises(phalanx.TaskError) as ei:
        phalanx.get(fails.remote(7))
    err = ei.value
    assert isinstance(err, ValueError)  # still catchable as the original type
    assert "bad value 7" in str(err)
    # Ray's text: the task's name and process first, then its own frames only (not the worker's run_task)
    first, *rest = str(err).splitlines()
    assert re.fullmatch(r"ray::fails\(\) \(pid=\d+, ip=[\d.]+\)", first), str(err)
    assert any("in fails" in line for line in rest) and not any("run_task" in line for line in rest), str(err)
    assert rest[-1] == "ValueError: bad value 7"
    assert isinstance(err.cause, ValueError)


def test_error_propagates_through_dependent_tasks(cluster):
    with pytest.raises(ValueError, match="bad value 1"):
        phalanx.get(echo.remote(fails.remote(1)))


def test_unpicklable_argument_fails_at_remote_naming_it(cluster):
    lock = threading.Lock()
    with pytest.raises(phalanx.SerializationError, match=r"argument 0 of .*echo.*lock"):
        echo.remote(lock)
    with pytest.raises(phalanx.SerializationError, match="keyword argument 'x'"):
        echo.remote(x=lock)


def test_get_timeout(cluster):
    @phalanx.remote
    def sleepy():
        time.sleep(2)
    ref = sleepy.remote()
    t = time.monotonic()
    with pytest.raises(phalanx.GetTimeoutError):
        phalanx.get(ref, timeout=0.3)
    assert time.monotonic() - t < 5


def test_calling_remote_function_directly_is_an_error(cluster):
    with pytest.raises(TypeError, match=r"\.remote"):
        echo(1)


def test_get_rejects_non_refs(cluster):
    with pytest.raises(TypeError):
        phalanx.get(5)


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="unknown option"):
        phalanx.remote(num_gpu=1)(lambda: 0)
    with pytest.raises(ValueError, match="num_returns"):
        phalanx.remote(num_returns=-1)(lambda: 0)


def test_object_store_memory_is_refused_for_tasks_and_deprecated_for_actors_as_in_ray():
    with pytest.raises(ValueError, match="Setting 'object_store_memory' is not implemented for tasks"):
        phalanx.remote(object_store_memory=1 << 20)(lambda: 0)
    phalanx.remote(object_store_memory=None)(lambda: 0)  # (None: as if not given)

    class A:
        pass

    with pytest.warns(DeprecationWarning, match="Setting 'object_store_memory' for actors is deprecated"):
        phalanx.remote(object_store_memory=1 << 20)(A)
    with pytest.raises(ValueError, match="only accepts None, 0 or a positive integer"):
        phalanx.remote(object_store_memory=-1)(A)
    with pytest.raises(TypeError, match="must be"):
        phalanx.remote(object_store_memory=1.5)(A)


def test_worker_crash_is_retried(cluster, tmp_path):
    marker = tmp_path / "crashed-once"

    @phalanx.remote(max_retries=2)
    def crash_once(path):
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(1)
        return "second attempt"
    assert phalanx.get(crash_once.remote(str(marker)), timeout=60) == "second attempt"


def test_worker_crash_after_retries_raises(cluster):
    @phalanx.remote(max_retries=1)
    def always_crash():
        os.kill(os.getpid(), signal.SIGKILL)
    with pytest.raises(phalanx.WorkerCrashedError, match="always_crash.*signal 9"):
        phalanx.get(always_crash.remote(), timeout=60)
    assert phalanx.get(echo.remote("still works"), timeout=60) == "still works"


def test_object_larger_than_store_is_a_clear_error(fresh_cluster):
    # (without spilling: with it, a full store goes to disk; tests/python/test_spill.py)
    fresh_cluster(object_store_memory=64 << 20, _system_config={"spill": 0})
    with pytest.raises(phalanx.ObjectStoreFullError, match="larger than the whole object store"):
        phalanx.put(np.zeros(100 << 20, dtype=np.uint8))
    keep = [phalanx.put(np.zeros(20 << 20, dtype=np.uint8)) for _ in range(3)]
    with pytest.raises(phalanx.ObjectStoreFullError, match="object store is full"):
        phalanx.put(np.zeros(20 << 20, dtype=np.uint8))
    del keep  # nothing was lost: the store works again once refs drop
    deadline = time.monotonic() + 10
    while True:
        try:
            assert phalanx.get(phalanx.put(np.ones(20 << 20, dtype=np.uint8))).sum() == 20 << 20
            break
        except phalanx.ObjectStoreFullError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_dead_raylet_gives_an_error_naming_it(fresh_cluster):
    fresh_cluster()

    @phalanx.remote
    def sleepy():
        time.sleep(60)
    ref = sleepy.remote()
    raylet = node_procs()["raylet"]
    threading.Timer(0.5, raylet.kill).start()
    t = time.monotonic()
    with pytest.raises(phalanx.UnavailableError, match="raylet"):
        phalanx.get(ref)
    assert time.monotonic() - t < 15


def test_redis_gone_past_the_reconnect_deadline_gives_an_error_naming_it(fresh_cluster):
    # (A redis-server that dies is started again by the head raylet:
    # tests/chaos/test_gcs.py. This one cannot be: its command line is gone.)
    info = fresh_cluster(_system_config={"gcs_reconnect_timeout_ms": 1000})

    @phalanx.remote
    def sleepy():
        time.sleep(60)
    ref = sleepy.remote()
    os.unlink(os.path.join(info["session_dir"], "redis.argv"))
    node_procs()["redis-server"].kill()
    t = time.monotonic()
    with pytest.raises(phalanx.UnavailableError, match="redis-server.*reconnect deadline"):
        phalanx.get(ref)
    assert time.monotonic() - t < 15


def test_first_use_starts_the_embedded_cluster_unless_turned_off(monkeypatch):
    # As Ray: the first .remote()/put/get without init() starts one.
    phalanx.shutdown()
    assert phalanx.get(echo.remote(1), timeout=60) == 1
    assert phalanx.is_initialized()
    phalanx.shutdown()
    monkeypatch.setenv("PHALANX_AUTO_INIT", "0")
    with pytest.raises(phalanx.UnavailableError, match="init"):
        echo.remote(1)
    assert not phalanx.is_initialized()


def test_get_of_a_ref_nobody_made_fails_at_once(cluster):
    import time as _time
    made_up = phalanx.ObjectRef(os.urandom(20))
    start = _time.monotonic()
    with pytest.raises(phalanx.exceptions.NotFoundError, match="no such object"):
        phalanx.get(made_up, timeout=60)
    assert _time.monotonic() - start < 10
    ready, _ = phalanx.wait([phalanx.ObjectRef(os.urandom(20))], timeout=60)
    assert len(ready) == 1  # decided (it is an error), not left waiting
    # A real pending result is not mistaken for one.
    @phalanx.remote
    def slow():
        _time.sleep(1.5)
        return 3
    assert phalanx.get(slow.remote(), timeout=60) == 3


@phalanx.remote
class Gate:
    def __init__(self):
        self.opened = False

    def open(self):
        self.opened = True

    def is_open(self):
        return self.opened


@phalanx.remote
class Worker:
    def fail(self):
        raise ValueError("this call failed")

    def wait_for(self, gate):
        while not phalanx.get(gate.is_open.remote()):
            time.sleep(0.01)
        return "through"


def test_a_get_of_several_ends_at_the_first_failure_as_rays(cluster):
    # The rest wait on the program that waits on this get: waiting for them all would hang it.
    @phalanx.remote
    def bad():
        raise ValueError("this task failed")

    @phalanx.remote
    def wait_for(gate):
        while not phalanx.get(gate.is_open.remote()):
            time.sleep(0.01)
        return "through"

    gate = Gate.remote()
    a, b = Worker.remote(), Worker.remote()
    for failing, blocked in ((bad.remote(), wait_for.remote(gate)),      # tasks, through the raylet
                             (a.fail.remote(), b.wait_for.remote(gate)),  # direct actor calls
                             (bad.remote(), b.wait_for.remote(gate))):    # one of each
        t = time.monotonic()
        with pytest.raises(ValueError, match="failed"):
            phalanx.get([blocked, failing], timeout=60)
        assert time.monotonic() - t < 15
        phalanx.get(gate.open.remote(), timeout=60)
        assert phalanx.get(blocked, timeout=60) == "through"  # (nothing of it was lost)
        gate = Gate.remote()


# ---- sys.exit and KeyboardInterrupt in a task or actor never end the caller (issue 55) ----

_EXITING_DRIVER = """
import phalanx
phalanx.init(num_cpus=1)

@phalanx.remote
class Quitter:
    def quit(self):
        import sys
        sys.exit(1)

q = Quitter.remote()
phalanx.get(q.quit.remote(), timeout=60)
print("NOT REACHED")
"""


def test_a_driver_whose_actor_calls_sys_exit_fails_with_rays_actor_error(tmp_path):
    import subprocess
    import sys
    script = tmp_path / "driver.py"
    script.write_text(_EXITING_DRIVER)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)  # before: 0, silently
    assert "NOT REACHED" not in out.stdout
    # (a failing code is a crash, as Ray's SYSTEM_ERROR exit: the error names the code, as Ray's "exit code 1")
    assert "ActorDiedError" in out.stderr and "exited with code 1" in out.stderr, out.stderr


@phalanx.remote
class Quitter:
    def quit(self, code):
        import sys
        sys.exit(code)

    def pid(self):
        return os.getpid()


def test_sys_exit_in_an_actor_ends_it_for_good_and_the_caller_gets_an_actor_error(cluster):
    # Code 0 (or none) is an intended exit, as exit_actor(): not restarted.
    q = Quitter.options(max_restarts=2).remote()
    pid = phalanx.get(q.pid.remote())
    with pytest.raises(phalanx.exceptions.RayActorError, match=r"called sys.exit\(0\)") as ei:
        phalanx.get(q.quit.remote(0), timeout=60)
    assert not isinstance(ei.value, (SystemExit, KeyboardInterrupt))
    with pytest.raises(phalanx.exceptions.RayActorError):  # not restarted, though max_restarts=2
        phalanx.get(q.pid.remote(), timeout=60)
    with pytest.raises(ProcessLookupError):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.05)


def test_sys_exit_with_a_failing_code_in_an_actor_is_a_crash_it_is_restarted_from(cluster):
    # As Ray's SYSTEM_ERROR exit: the actor restarts (max_restarts) and the call
    # is retried where max_task_retries allows.
    q = Quitter.options(max_restarts=1).remote()
    first = phalanx.get(q.pid.remote())
    with pytest.raises(phalanx.exceptions.RayActorError):  # max_task_retries=0: the call is not retried
        phalanx.get(q.quit.remote(3), timeout=60)
    # (a call sent straight to the old process before its end was seen fails too, as Ray's may: ask again)
    deadline = time.monotonic() + 60
    while True:
        try:
            second = phalanx.get(q.pid.remote(), timeout=60)
            break
        except phalanx.exceptions.RayActorError:
            assert time.monotonic() < deadline, "the actor was not restarted"
            time.sleep(0.1)
    assert second != first
    with pytest.raises(phalanx.exceptions.RayActorError):  # no restarts left
        phalanx.get(q.quit.remote("a reason"), timeout=60)
    with pytest.raises(phalanx.exceptions.RayActorError):
        phalanx.get(q.pid.remote(), timeout=60)


def test_sys_exit_or_keyboard_interrupt_in_a_task_reaches_the_caller_as_an_ordinary_error(cluster):
    @phalanx.remote(max_retries=0)
    def quits():
        import sys
        sys.exit(2)

    @phalanx.remote
    def interrupted_in_a_thread():
        errors = []

        def run():
            try:
                raise KeyboardInterrupt("from the task's own code")
            except BaseException as e:  # noqa: BLE001 - raised again in the task's own thread below
                errors.append(e)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        raise errors[0]

    with pytest.raises(phalanx.exceptions.WorkerCrashedError, match=r"sys.exit\(2\)") as ei:
        phalanx.get(quits.remote(), timeout=60)
    assert not isinstance(ei.value, SystemExit)
    with pytest.raises(phalanx.TaskError, match="from the task's own code") as ei:
        phalanx.get(interrupted_in_a_thread.remote(), timeout=60)
    assert not isinstance(ei.value, KeyboardInterrupt) and isinstance(ei.value.cause, KeyboardInterrupt)
    assert phalanx.get(echo.remote(5)) == 5  # the cluster goes on



def test_rays_remote_debugger_is_refused_saying_why(capsys):
    from phalanx import scripts
    from phalanx.util import pdb, rpdb

    with pytest.raises(NotImplementedError, match="no remote debugger"):
        rpdb.set_trace()
    assert pdb.set_trace is rpdb.set_trace
    assert scripts.main(["debug"]) == 2
    assert "no remote debugger" in capsys.readouterr().err
