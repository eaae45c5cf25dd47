"""An actor ends when its creator's last handle goes out of scope, as in Ray, ported with `import phalanx
as ray`.

Source: ray-project/ray, python/ray/tests/test_actor.py (test_actor_deletion) and Ray's page "Actor
Lifetimes" (docs.ray.io/en/latest/ray-core/actors/terminating-actors.html: "an actor is terminated
automatically when all copies of the actor handle have gone out of scope"; its pending calls run first).
Named and detached actors are not ended so. A handle passed to a task or another actor may be held
there, so phalanx then leaves the actor alone (python/phalanx/_private/actor_lifetime.py)."""
import gc
import os
import time

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


def test_named_detached_and_passed_on_actors_stay(cluster):
    named = Actor.options(name="stays").remote()
    detached = Actor.options(name="stays-detached", lifetime="detached").remote()
    passed = Actor.remote()

    @ray.remote
    def use(h):
        return ray.get(h.getpid.remote())

    pids = ray.get([named.getpid.remote(), detached.getpid.remote(), use.remote(passed)])
    named = detached = passed = None
    gc.collect()
    probe = Actor.remote()  # one that does end: once it has, the others would have too
    probe_pid = ray.get(probe.getpid.remote())
    probe = None
    gc.collect()
    wait_until(lambda: pid_exited(probe_pid), what="the probe actor's process to exit")
    assert not any(pid_exited(p) for p in pids)
    assert ray.get(ray.get_actor("stays").getpid.remote()) == pids[0]
    for name in ("stays", "stays-detached"):
        ray.kill(ray.get_actor(name))
