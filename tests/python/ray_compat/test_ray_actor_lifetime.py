"""An actor ends when its creator's last handle goes out of scope, as in Ray, ported with `import phalanx
as ray`.

Source: ray-project/ray, python/ray/tests/test_actor.py (test_actor_deletion) and Ray's page "Actor
Lifetimes" (docs.ray.io/en/latest/ray-core/actors/terminating-actors.html: "an actor is terminated
automatically when all copies of the actor handle have gone out of scope"; its pending calls run first).
Detached actors are not ended so. Handles passed to tasks and other actors, returned or put count
wherever they are, as in Ray (python/phalanx/_private/actor_lifetime.py); handles got by name and bytes
of plain `pickle` do not."""
import gc
import os
import time

import pytest

import phalanx as ray

from conftest import wait_until


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

    def slow(self, x):
        time.sleep(0.3)
        return x


def test_actor_deletion(cluster):
    # Make sure that when an actor handles goes out of scope, the actor destructor is called.
    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    a = None
    gc.collect()
    wait_until(lambda: pid_exited(pid), what="the actor's process to exit")

    actors = [Actor.remote() for _ in range(10)]
    pids = ray.get([a.getpid.remote() for a in actors])
    a = None
    actors = None
    gc.collect()
    for pid in pids:
        wait_until(lambda: pid_exited(pid), what="each actor's process to exit")


def test_its_pending_calls_run_first_and_its_cpu_is_freed(fresh_cluster):
    fresh_cluster(num_cpus=1)

    @ray.remote(num_cpus=1)
    class OneCpu:
        def getpid(self):
            return os.getpid()

        def slow(self, x):
            time.sleep(0.3)
            return x

    a = OneCpu.remote()
    pid = ray.get(a.getpid.remote())
    pending = [a.slow.remote(i) for i in range(3)]
    del a
    gc.collect()
    assert ray.get(pending, timeout=60) == [0, 1, 2]
    wait_until(lambda: pid_exited(pid), what="the actor's process to exit")
    b = OneCpu.remote()  # the only CPU is free again
    assert ray.get(b.slow.remote(9), timeout=60) == 9
    # Calls made before the actor is up go through the raylet: they run first too.
    del b
    c = OneCpu.remote()
    early = [c.slow.remote(i) for i in range(3)]
    del c
    gc.collect()
    assert ray.get(early, timeout=60) == [0, 1, 2]


def ends_by_probe():
    """Makes and drops an actor that does end; once it has, any actor dropped before it would have too."""
    probe = Actor.remote()
    probe_pid = ray.get(probe.getpid.remote())
    probe = None
    gc.collect()
    wait_until(lambda: pid_exited(probe_pid), what="the probe actor's process to exit")


def test_named_actors_end_too_and_detached_ones_stay(cluster):
    # Ray 2.60 ends a named actor that is not detached when its creator's handles are gone; a handle
    # got by name does not count (checked on Ray: tests/python/ray_suite/test_ray_actor_lifetime.py).
    named = Actor.options(name="ends").remote()
    detached = Actor.options(name="stays-detached", lifetime="detached").remote()
    by_name = ray.get_actor("ends")
    named_pid, detached_pid = ray.get([named.getpid.remote(), detached.getpid.remote()])
    named = detached = None
    gc.collect()
    wait_until(lambda: pid_exited(named_pid), what="the named actor's process to exit")
    with pytest.raises(ray.exceptions.ActorDiedError, match="all references to the actor were removed"):
        ray.get(by_name.getpid.remote(), timeout=30)
    assert not pid_exited(detached_pid)
    ray.kill(ray.get_actor("stays-detached"))


@ray.remote
class Holder:
    """Keeps handles it is given (another process holding them)."""

    def __init__(self):
        self.handles = []

    def keep(self, handles):
        self.handles.extend(handles)
        return len(self.handles)

    def call_then_drop(self, n):
        # Calls straight to the actor's worker, not waited for here, then the last handle goes.
        for i in range(n):
            self.handles[0].record.remote(i)
        self.handles = []
        gc.collect()


def test_a_handle_held_in_another_process_keeps_the_actor(cluster):
    # Ray: "Actor processes will be terminated automatically when all copies of the actor handle have
    # gone out of scope" (docs.ray.io, terminating-actors). The copy a Holder keeps counts.
    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    holder = Holder.remote()
    assert ray.get(holder.keep.remote([a])) == 1  # (inside a list: a ref inside a value)
    a = None
    gc.collect()
    ends_by_probe()
    assert not pid_exited(pid)
    holder = None  # the holder ends, and with it the last copy
    gc.collect()
    wait_until(lambda: pid_exited(pid), what="the actor's process to exit once its last copy is gone")


def test_a_handle_passed_to_a_task_that_drops_it(cluster):
    @ray.remote
    def use(h):
        return ray.get(h.getpid.remote())

    a = Actor.remote()
    pid = ray.get(use.remote(a))
    a = None
    gc.collect()
    wait_until(lambda: pid_exited(pid), what="the actor's process to exit")


def test_a_handle_inside_a_put_value(cluster):
    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    ref = ray.put({"actor": a})
    a = None
    gc.collect()
    ends_by_probe()
    assert not pid_exited(pid)
    assert ray.get(ray.get(ref)["actor"].getpid.remote()) == pid  # (a copy made and dropped here)
    gc.collect()
    ends_by_probe()
    assert not pid_exited(pid)
    ref = None
    gc.collect()
    wait_until(lambda: pid_exited(pid), what="the actor's process to exit once the value is freed")


def test_a_borrowers_calls_run_before_the_actor_ends(cluster, tmp_path):
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
    r = None
    gc.collect()
    ray.get(holder.call_then_drop.remote(5))
    wait_until(lambda: pid_exited(pid), what="the actor's process to exit")
    assert log.read_text().split() == ["0", "1", "2", "3", "4"]


def test_a_handle_pickled_outside_phalanx_does_not_count(cluster):
    # As in Ray: nothing can count where plain pickle's bytes go; loaded after the actor ended, the
    # handle's calls fail saying why it ended.
    import pickle
    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    blob = pickle.dumps(a)
    a = None
    gc.collect()
    wait_until(lambda: pid_exited(pid), what="the actor's process to exit")
    with pytest.raises(ray.exceptions.ActorDiedError, match="all references to the actor were removed"):
        ray.get(pickle.loads(blob).getpid.remote(), timeout=30)


def test_handles_counted_across_nodes():
    # Two raylets on loopback: the actor lives on the second node while the driver created it on the
    # first; a Holder on the second node keeps a copy; when it is gone the actor ends (its host kills it).
    from conftest import loopback_nodes

    with loopback_nodes([None, {"b": 2}]):
        placed = Actor.options(resources={"b": 1}).remote()
        pid = ray.get(placed.getpid.remote())
        holder = Holder.options(resources={"b": 1}).remote()
        ray.get(holder.keep.remote([placed]))
        placed = None
        gc.collect()
        ends_by_probe()
        assert not pid_exited(pid)
        ray.kill(holder)  # its process goes, and the hold it had with it
        holder = None
        wait_until(lambda: pid_exited(pid), what="the actor on the other node to exit")
