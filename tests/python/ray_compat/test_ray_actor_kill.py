"""Ray's own tests of `ray.kill` on actors, ported with `import phalanx as ray`.

Source: ray-project/ray, python/ray/tests/test_actor.py:
test_kill_pending_actor_with_no_restart_true, test_kill_pending_actor_with_no_restart_false,
test_get_actor_after_killed. Ray's tests read the GCS's resource demands through its private state
accessor; here the same facts are read from phalanx's actor table in the GCS (state, restarts) and
from what the cluster then runs. A kill with no_restart=False is a death that max_restarts counts,
also before the actor's worker has started."""
import pytest

import phalanx as ray
from phalanx import _core
from phalanx._private import state
from phalanx._private.rpc_tables import primary

from conftest import wait_until


def actor_row(handle):
    host, port = primary(state.info["gcs_address"])
    rows = [a for a in _core.gcs_actors(host, int(port), 5.0) if a["actor_id"] == handle._actor_id.hex()]
    return rows[0] if rows else None


@ray.remote(resources={"WORKER": 1.0})
class PendingActor:
    pass


def test_kill_pending_actor_with_no_restart_true(fresh_cluster):
    fresh_cluster(num_cpus=1)
    actor = PendingActor.remote()
    wait_until(lambda: actor_row(actor) is not None, what="the actor in the GCS")
    ray.kill(actor, no_restart=True)
    wait_until(lambda: actor_row(actor)["state"] == "DEAD", what="the pending actor dead")
    assert "killed" in actor_row(actor)["death_cause"]


def test_kill_pending_actor_with_no_restart_false(fresh_cluster):
    fresh_cluster(num_cpus=1)
    actor = PendingActor.options(max_restarts=1).remote()
    wait_until(lambda: actor_row(actor) is not None, what="the actor in the GCS")
    ray.kill(actor, no_restart=False)
    # Ray: "Actor restarts, so the infeasible task queue length is 1."
    wait_until(lambda: actor_row(actor)["restarts"] == 1, what="the pending actor restarted once")
    assert actor_row(actor)["state"] == "RESTARTING"
    # "Kill actor again and actor is dead, so the infeasible task queue length is 0."
    ray.kill(actor, no_restart=False)
    wait_until(lambda: actor_row(actor)["state"] == "DEAD", what="the pending actor dead past max_restarts")
    assert "max_restarts=1" in actor_row(actor)["death_cause"]


@ray.remote(num_cpus=1, max_restarts=1)
class OneCpu:
    def ready(self):
        return True


def test_killed_before_it_started_the_actor_gives_its_cpu_back(fresh_cluster):
    """The defect of issue 36: two kills of an actor that had not started yet, max_restarts=1: it lived on
    with the only CPU, and the next actor waited for ever."""
    fresh_cluster(num_cpus=1)
    a = OneCpu.remote()
    ray.kill(a, no_restart=False)
    ray.kill(a, no_restart=False)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.ready.remote(), timeout=60)
    b = OneCpu.remote()
    assert ray.get(b.ready.remote(), timeout=60)


def test_get_actor_after_killed(fresh_cluster):
    fresh_cluster(num_cpus=2)

    @ray.remote
    class A:
        def ready(self):
            return True

    actor = A.options(name="actor", namespace="namespace", lifetime="detached").remote()
    ray.kill(actor)
    with pytest.raises(ValueError):
        ray.get_actor("actor", namespace="namespace")

    actor = A.options(name="actor_2", namespace="namespace", lifetime="detached", max_restarts=1,
                      max_task_retries=-1).remote()
    ray.kill(actor, no_restart=False)
    assert ray.get(ray.get_actor("actor_2", namespace="namespace").ready.remote(), timeout=60)
    ray.kill(actor)
