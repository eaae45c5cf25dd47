"""phalanx.cancel: a queued task never runs, a running one gets
KeyboardInterrupt (or its worker is killed with force=True), an async
actor's call is cancelled as an asyncio task; get then raises
TaskCancelledError. Bad input is a clear error.

A test that cancels something running waits for it to say so: the task
touches a "started" file (inline: a task cannot call a plain function of a
test module, which its worker cannot import), and the test waits for that
file (wait_started) instead of sleeping a guess."""
import asyncio
import os
import time

import pytest

import phalanx
from conftest import loopback_nodes, wait_until
from phalanx.exceptions import InvalidArgumentError, TaskCancelledError


def wait_started(path, timeout=30.0):
    wait_until(lambda: os.path.exists(path), timeout, what=f"the task's started file {path}")


@phalanx.remote(max_retries=3)
def sleeper(seconds, started=None):
    if started:  # (says that it runs)
        open(started, "w").close()
    time.sleep(seconds)
    return "finished"


@phalanx.remote
def catches_interrupt(started):
    if started:  # (says that it runs)
        open(started, "w").close()
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        return "saw KeyboardInterrupt"  # cancelled all the same: the caller gets TaskCancelledError


@phalanx.remote
class Slow:
    async def wait(self, seconds, started=None):
        if started:  # (says that it runs)
            open(started, "w").close()
        await asyncio.sleep(seconds)
        return "finished"

    async def ping(self):
        return "pong"


@phalanx.remote
class SyncSlow:
    def work(self, seconds, started=None):
        if started:  # (says that it runs)
            open(started, "w").close()
        time.sleep(seconds)
        return "finished"


def test_a_running_task_is_interrupted(cluster, tmp_path):
    started = str(tmp_path / "started")
    ref = sleeper.remote(60, started)
    wait_started(started)
    t0 = time.monotonic()
    phalanx.cancel(ref)
    with pytest.raises(TaskCancelledError, match="cancelled while it ran"):
        phalanx.get(ref, timeout=20)
    assert time.monotonic() - t0 < 10
    assert phalanx.get(sleeper.remote(0), timeout=20) == "finished"  # the worker goes on


def test_a_queued_task_never_runs(cluster):
    busy = [sleeper.remote(2) for _ in range(2)]  # both CPUs
    queued = sleeper.remote(0)
    phalanx.cancel(queued)
    with pytest.raises(TaskCancelledError, match="before it ran"):
        phalanx.get(queued, timeout=20)
    assert phalanx.get(busy, timeout=30) == ["finished"] * 2


def test_force_kills_the_worker_and_does_not_retry(cluster, tmp_path):
    started = str(tmp_path / "started")
    ref = catches_interrupt.remote(started)
    wait_started(started)
    phalanx.cancel(ref, force=True)
    with pytest.raises(TaskCancelledError, match="force=True"):
        phalanx.get(ref, timeout=20)


def test_a_task_catching_the_interrupt_is_still_cancelled(cluster, tmp_path):
    started = str(tmp_path / "started")
    ref = catches_interrupt.remote(started)
    wait_started(started)
    phalanx.cancel(ref)
    with pytest.raises(TaskCancelledError):
        phalanx.get(ref, timeout=20)


def test_an_async_actor_call_is_cancelled_as_an_asyncio_task(cluster, tmp_path):
    started = str(tmp_path / "started")
    a = Slow.remote()
    running = a.wait.remote(60, started)
    wait_started(started)
    phalanx.cancel(running)
    with pytest.raises(TaskCancelledError, match="asyncio"):
        phalanx.get(running, timeout=20)
    assert phalanx.get(a.ping.remote(), timeout=20) == "pong"  # the actor lives on


def test_a_queued_sync_actor_call_never_runs(cluster, tmp_path):
    started = str(tmp_path / "started")
    a = SyncSlow.remote()
    first = a.work.remote(1.5, started)
    second = a.work.remote(0)
    wait_started(started)  # the first runs; the second waits behind it
    phalanx.cancel(second)
    assert phalanx.get(first, timeout=20) == "finished"  # running: goes on, as in Ray
    with pytest.raises(TaskCancelledError):
        phalanx.get(second, timeout=20)


@phalanx.remote
class Stoppable:
    def work(self, started):
        if started:  # (says that it runs)
            open(started, "w").close()
        for _ in range(400):
            if phalanx.get_runtime_context().is_canceled():
                return "saw the cancel"
            time.sleep(0.05)
        return "never saw it"


def test_a_running_sync_actor_call_can_see_its_cancel(cluster, tmp_path):
    started = str(tmp_path / "started")
    a = Stoppable.remote()
    ref = a.work.remote(started)
    wait_started(started)
    phalanx.cancel(ref)
    # As in Ray: the call is not interrupted; it sees is_canceled() and stops (its value is the cancel).
    with pytest.raises(TaskCancelledError):
        phalanx.get(ref, timeout=20)


@phalanx.remote
def touch_after(path, seconds, started=None):
    if started:  # (says that it runs)
        open(started, "w").close()
    time.sleep(seconds)
    with open(path, "w") as f:
        f.write("the child ran to its end")
    return "touched"


@phalanx.remote
def parent_of(path, seconds, child_started):
    return phalanx.get(touch_after.remote(path, seconds, child_started))


@pytest.mark.parametrize("recursive", [True, False])
def test_recursive_decides_whether_the_children_are_cancelled(cluster, tmp_path, recursive):
    marker, child_started = tmp_path / "child-finished", str(tmp_path / "child-started")
    parent = parent_of.remote(str(marker), 3.0, child_started)
    wait_started(child_started)  # the parent waits in get for its child, which sleeps
    t0 = time.monotonic()
    phalanx.cancel(parent, recursive=recursive)
    with pytest.raises(TaskCancelledError):
        phalanx.get(parent, timeout=20)
    assert time.monotonic() - t0 < 1.5  # the parent is interrupted in its get either way
    if not recursive:
        wait_until(marker.exists, 20, what="the child, not cancelled, to run to its end")
    else:
        # The child would have ended 3 s after it started: a second past that, it was cancelled with its parent.
        time.sleep(max(0.0, os.path.getmtime(child_started) + 3.0 + 1.0 - time.time()))
        assert not marker.exists()


@phalanx.remote
class AsyncParent:
    async def spawn(self, path, seconds, child_started):
        return await touch_after.remote(path, seconds, child_started)


def test_recursive_reaches_the_children_of_one_async_actor_call(cluster, tmp_path):
    # Two calls interleave on the actor's event loop; cancelling one cancels
    # its child only.
    a = AsyncParent.remote()
    one, two = tmp_path / "one", tmp_path / "two"
    first = a.spawn.remote(str(one), 2.0, str(tmp_path / "one-started"))
    second = a.spawn.remote(str(two), 2.0, str(tmp_path / "two-started"))
    wait_started(str(tmp_path / "one-started"))  # both children sleep
    wait_started(str(tmp_path / "two-started"))
    phalanx.cancel(first)
    with pytest.raises(TaskCancelledError):
        phalanx.get(first, timeout=20)
    assert phalanx.get(second, timeout=20) == "touched"
    # The first child would have ended 2 s after it started: half a second past that, it was cancelled.
    time.sleep(max(0.0, os.path.getmtime(tmp_path / "one-started") + 2.0 + 0.5 - time.time()))
    assert not one.exists() and two.exists()


def test_is_canceled_outside_a_task_is_an_error(cluster):
    with pytest.raises(RuntimeError, match="only available inside"):
        phalanx.get_runtime_context().is_canceled()


def test_cancelling_a_finished_task_changes_nothing(cluster):
    ref = sleeper.remote(0)
    assert phalanx.get(ref, timeout=20) == "finished"
    phalanx.cancel(ref)
    assert phalanx.get(ref, timeout=20) == "finished"


def test_bad_cancels_are_clear_errors(cluster):
    a = Slow.remote()
    with pytest.raises(InvalidArgumentError, match="not an actor handle"):
        phalanx.cancel(a)
    with pytest.raises(TypeError, match="takes an ObjectRef"):
        phalanx.cancel("not a ref")


@phalanx.remote(resources={"far": 1})
def far_sleeper(seconds, started):
    if started:  # (says that it runs)
        open(started, "w").close()
    time.sleep(seconds)
    return "finished"


def test_a_task_spilled_to_another_node_is_cancelled_there(tmp_path):
    started = str(tmp_path / "started")
    with loopback_nodes([None, {"far": 1}]):
        ref = far_sleeper.remote(60, started)
        wait_started(started)
        phalanx.cancel(ref)
        with pytest.raises(TaskCancelledError):
            phalanx.get(ref, timeout=20)


def test_a_call_sent_to_an_actor_on_another_node_is_cancelled_there(tmp_path):
    @phalanx.remote(resources={"far": 1})
    class Far:
        def __init__(self):
            self.ran = []

        def slow(self, t, started):
            if started:  # (says that it runs)
                open(started, "w").close()
            time.sleep(t)
            self.ran.append("slow")

        def mark(self):
            self.ran.append("mark")

        def log(self):
            return self.ran

    with loopback_nodes([None, {"far": 1}]):
        started = str(tmp_path / "started")
        a = Far.remote()
        first = a.slow.remote(2.0, started)  # (made while the actor starts: these go through the raylets)
        second = a.mark.remote()
        wait_started(started)  # both were sent to the far node; the first runs, the second waits there
        phalanx.cancel(second)
        with pytest.raises(TaskCancelledError):
            phalanx.get(second, timeout=20)
        phalanx.get(first, timeout=20)
        assert phalanx.get(a.log.remote(), timeout=20) == ["slow"]  # the cancelled call never ran


@phalanx.remote
def slow_counter():
    for i in range(100):
        time.sleep(0.1)
        yield i


def test_cancelling_a_generator_ends_it_with_the_cancel(cluster):
    gen = slow_counter.remote()
    assert phalanx.get(next(gen), timeout=20) == 0
    phalanx.cancel(gen)
    with pytest.raises(TaskCancelledError):
        for ref in gen:  # the items made before the cancel, then the cancel itself
            phalanx.get(ref, timeout=20)
