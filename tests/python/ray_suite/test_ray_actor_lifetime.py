"""When an actor ends because its handles are gone, as Ray's `python/ray/tests/test_actor.py`
(`test_actor_deletion`, `test_actor_exit_from_task`) and the page "Terminating Actors"
(docs.ray.io/en/latest/ray-core/actors/terminating-actors.html) have it: "Actor processes will be
terminated automatically when all copies of the actor handle have gone out of scope in Python, or if
the original creator process dies." The tests without a Ray namesake check that sentence case by case:
copies held by other actors, passed to tasks, put in values and returned count, and the calls made
through a copy run first; a named actor ends so too and a handle got by name does not count, a
detached one stays, and plain `pickle` bytes do not count (what Ray 2.60 does, run side by side)."""
import gc
import os
import pickle
import time

import pytest

import ray
from suite_utils import wait_for_condition


def pid_exited(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@ray.remote
class Actor:
    def getpid(self):
        return os.getpid()


@ray.remote
class Holder:
    def __init__(self):
        self.handles = []

    def keep(self, handles):
        self.handles.extend(handles)
        return len(self.handles)

    def drop(self):
        self.handles = []
        gc.collect()

    def call_then_drop(self, n):
        for i in range(n):
            self.handles[0].record.remote(i)  # not waited for
        self.handles = []
        gc.collect()


def drop_a_probe():
    """An actor made and dropped that does end: once it has, an actor dropped before it would have."""
    probe = Actor.remote()
    pid = ray.get(probe.getpid.remote())
    del probe
    gc.collect()
    wait_for_condition(lambda: pid_exited(pid), timeout=30)


def test_actor_deletion(ray_start_regular_shared):
    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    a = None
    gc.collect()
    wait_for_condition(lambda: pid_exited(pid), timeout=30)


def test_actor_exit_from_task(ray_start_regular_shared):
    @ray.remote
    class Inner:
        def f(self):
            return 0

    @ray.remote
    def f():
        a = Inner.remote()
        x_id = a.f.remote()
        return [x_id]

    x_id = ray.get(f.remote())[0]
    assert ray.get(x_id, timeout=30) == 0  # the call made before the handle went runs: no hang


def test_copy_held_by_another_actor_keeps_it(ray_start_regular_shared):
    # "all copies of the actor handle": one an actor keeps counts.
    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    holder = Holder.remote()
    assert ray.get(holder.keep.remote([a])) == 1
    del a
    gc.collect()
    drop_a_probe()
    assert not pid_exited(pid)
    ray.get(holder.drop.remote())
    wait_for_condition(lambda: pid_exited(pid), timeout=30)


def test_copy_passed_to_a_task_that_drops_it(ray_start_regular_shared):
    @ray.remote
    def use(h):
        return ray.get(h.getpid.remote())

    a = Actor.remote()
    pid = ray.get(use.remote(a))
    del a
    gc.collect()
    wait_for_condition(lambda: pid_exited(pid), timeout=30)


def test_copy_inside_a_put_value(ray_start_regular_shared):
    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    ref = ray.put([a])
    del a
    gc.collect()
    drop_a_probe()
    assert not pid_exited(pid)
    assert ray.get(ray.get(ref)[0].getpid.remote()) == pid
    del ref
    gc.collect()
    wait_for_condition(lambda: pid_exited(pid), timeout=30)


def test_copy_returned_by_a_task(ray_start_regular_shared):
    @ray.remote
    def make():
        a = Actor.remote()
        return a, ray.get(a.getpid.remote())

    a, pid = ray.get(make.remote())
    gc.collect()
    drop_a_probe()
    assert ray.get(a.getpid.remote()) == pid  # the task that made it is over; the copy here keeps it
    del a
    gc.collect()
    wait_for_condition(lambda: pid_exited(pid), timeout=30)


def test_calls_through_a_copy_run_before_it_ends(ray_start_regular_shared, tmp_path):
    log = tmp_path / "calls"

    @ray.remote
    class Recorder:
        def __init__(self, path):
            self.path = path

        def getpid(self):
            return os.getpid()

        def record(self, i):
            time.sleep(0.05)
            with open(self.path, "a") as f:
                f.write(f"{i}\n")

    r = Recorder.remote(str(log))
    pid = ray.get(r.getpid.remote())
    holder = Holder.remote()
    ray.get(holder.keep.remote([r]))
    del r
    gc.collect()
    ray.get(holder.call_then_drop.remote(5))
    wait_for_condition(lambda: pid_exited(pid), timeout=30)
    assert log.read_text().split() == ["0", "1", "2", "3", "4"]


def test_named_actor_ends_with_its_handles_detached_stays(ray_start_regular_shared):
    # "Actor Lifetimes": only a detached actor outlives its handles; a handle got by name does not
    # count (Ray 2.60 ends the named actor although `by_name` is alive).
    named = Actor.options(name="lifetime-named").remote()
    detached = Actor.options(name="lifetime-detached", lifetime="detached").remote()
    by_name = ray.get_actor("lifetime-named")
    named_pid, detached_pid = ray.get([named.getpid.remote(), detached.getpid.remote()])
    del named, detached
    gc.collect()
    wait_for_condition(lambda: pid_exited(named_pid), timeout=30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(by_name.getpid.remote(), timeout=30)
    assert not pid_exited(detached_pid)
    ray.kill(ray.get_actor("lifetime-detached"))


def test_handle_pickled_out_of_band_does_not_count(ray_start_regular_shared):
    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    blob = pickle.dumps(a)
    del a
    gc.collect()
    wait_for_condition(lambda: pid_exited(pid), timeout=30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(pickle.loads(blob).getpid.remote(), timeout=30)
