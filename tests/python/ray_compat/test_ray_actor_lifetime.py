"""An actor ends when its last handle goes out of scope, as in Ray, ported with `import phalanx as ray`:
what needs phalanx's own fixtures and words (a 1-CPU cluster, raylets on loopback, the death's
message). The cases that run on Ray too (copies kept by actors, passed to tasks, put, returned, the
calls made through a copy) are in tests/python/ray_suite/test_ray_actor_lifetime.py.

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
    """Keeps the handles it is given (another process holding them)."""

    def __init__(self):
        self.handles = []

    def keep(self, handles):
        self.handles.extend(handles)
        return len(self.handles)


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
