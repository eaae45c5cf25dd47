"""phalanx.cancel: a queued task never runs, a running one gets
KeyboardInterrupt (or its worker is killed with force=True), an async
actor's call is cancelled as an asyncio task; get then raises
TaskCancelledError. Bad input is a clear error."""
import asyncio
import time

import pytest

import phalanx
from conftest import loopback_nodes
from phalanx.exceptions import InvalidArgumentError, TaskCancelledError


@phalanx.remote(max_retries=3)
def sleeper(seconds):
    time.sleep(seconds)
    return "finished"


@phalanx.remote
def catches_interrupt():
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        return "saw KeyboardInterrupt"  # cancelled all the same: the caller gets TaskCancelledError


@phalanx.remote
class Slow:
    async def wait(self, seconds):
        await asyncio.sleep(seconds)
        return "finished"

    async def ping(self):
        return "pong"


@phalanx.remote
class SyncSlow:
    def work(self, seconds):
        time.sleep(seconds)
        return "finished"


def test_a_running_task_is_interrupted(cluster):
    ref = sleeper.remote(60)
    time.sleep(1.0)  # running
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


def test_force_kills_the_worker_and_does_not_retry(cluster):
    ref = catches_interrupt.remote()
    time.sleep(1.0)
    phalanx.cancel(ref, force=True)
    with pytest.raises(TaskCancelledError, match="force=True"):
        phalanx.get(ref, timeout=20)


def test_a_task_catching_the_interrupt_is_still_cancelled(cluster):
    ref = catches_interrupt.remote()
    time.sleep(1.0)
    phalanx.cancel(ref)
    with pytest.raises(TaskCancelledError):
        phalanx.get(ref, timeout=20)


def test_an_async_actor_call_is_cancelled_as_an_asyncio_task(cluster):
    a = Slow.remote()
    running = a.wait.remote(60)
    time.sleep(0.5)
    phalanx.cancel(running)
    with pytest.raises(TaskCancelledError, match="asyncio"):
        phalanx.get(running, timeout=20)
    assert phalanx.get(a.ping.remote(), timeout=20) == "pong"  # the actor lives on


def test_a_queued_sync_actor_call_never_runs(cluster):
    a = SyncSlow.remote()
    first = a.work.remote(1.5)
    second = a.work.remote(0)
    time.sleep(0.3)
    phalanx.cancel(second)
    assert phalanx.get(first, timeout=20) == "finished"  # running: goes on, as in Ray
    with pytest.raises(TaskCancelledError):
        phalanx.get(second, timeout=20)


@phalanx.remote
class Stoppable:
    def work(self):
        for _ in range(400):
            if phalanx.get_runtime_context().is_canceled():
                return "saw the cancel"
            time.sleep(0.05)
        return "never saw it"


def test_a_running_sync_actor_call_can_see_its_cancel(cluster):
    a = Stoppable.remote()
    ref = a.work.remote()
    time.sleep(0.5)
    phalanx.cancel(ref)
    # As in Ray: the call is not interrupted; it sees is_canceled() and stops (its value is the cancel).
    with pytest.raises(TaskCancelledError):
        phalanx.get(ref, timeout=20)


@phalanx.remote
def touch_after(path, seconds):
    time.sleep(seconds)
    with open(path, "w") as f:
        f.write("the child ran to its end")
    return "touched"


@phalanx.remote
def parent_of(path, seconds):
    return phalanx.get(touch_after.remote(path, seconds))


@pytest.mark.parametrize("recursive", [True, False])
def test_recursive_decides_whether_the_children_are_cancelled(cluster, tmp_path, recursive):
    marker = tmp_path / "child-finished"
    parent = parent_of.remote(str(marker), 3.0)
    time.sleep(1.5)  # the parent waits in get for its child, which sleeps
    t0 = time.monotonic()
    phalanx.cancel(parent, recursive=recursive)
    with pytest.raises(TaskCancelledError):
        phalanx.get(parent, timeout=20)
    assert time.monotonic() - t0 < 1.5  # the parent is interrupted in its get either way
    time.sleep(3.0)
    assert marker.exists() == (not recursive)  # the child was cancelled with it, or ran on


@phalanx.remote
class AsyncParent:
    async def spawn(self, path, seconds):
        return await touch_after.remote(path, seconds)


def test_recursive_reaches_the_children_of_one_async_actor_call(cluster, tmp_path):
    # Two calls interleave on the actor's event loop; cancelling one cancels
    # its child only.
    a = AsyncParent.remote()
    one, two = tmp_path / "one", tmp_path / "two"
    first = a.spawn.remote(str(one), 2.0)
    second = a.spawn.remote(str(two), 2.0)
    time.sleep(1.0)  # both children sleep
    phalanx.cancel(first)
    with pytest.raises(TaskCancelledError):
        phalanx.get(first, timeout=20)
    assert phalanx.get(second, timeout=20) == "touched"
    time.sleep(1.5)
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
def far_sleeper(seconds):
    time.sleep(seconds)
    return "finished"


def test_a_task_spilled_to_another_node_is_cancelled_there():
    with loopback_nodes([None, {"far": 1}]):
        ref = far_sleeper.remote(60)
        time.sleep(1.5)
        phalanx.cancel(ref)
        with pytest.raises(TaskCancelledError):
            phalanx.get(ref, timeout=20)


def test_a_call_sent_to_an_actor_on_another_node_is_cancelled_there():
    @phalanx.remote(resources={"far": 1})
    class Far:
        def __init__(self):
            self.ran = []

        def slow(self, t):
            time.sleep(t)
            self.ran.append("slow")

        def mark(self):
            self.ran.append("mark")

        def log(self):
            return self.ran

    with loopback_nodes([None, {"far": 1}]):
        a = Far.remote()
        first = a.slow.remote(2.0)  # (made while the actor starts: these go through the raylets)
        second = a.mark.remote()
        time.sleep(1.0)  # both were sent to the far node; the first runs, the second waits there
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
