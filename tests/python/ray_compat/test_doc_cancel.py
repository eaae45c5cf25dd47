"""Ray's "Cancelling tasks" (docs.ray.io/en/latest/ray-core/tasks.html#cancelling-tasks)
and "Cancelling actor tasks" (ray-core/actors.html#cancelling-actor-tasks), as
the documentation writes them, with `import phalanx as ray`. Sleeps are
shortened; what the pages say happens is asserted."""
import asyncio
import time

import pytest

import phalanx as ray


def test_cancelling_tasks(cluster):
    @ray.remote
    def blocking_operation():
        time.sleep(10e6)

    obj_ref = blocking_operation.remote()
    time.sleep(0.5)
    ray.cancel(obj_ref)

    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(obj_ref)  # "Object reference was cancelled."


def test_cancelling_actor_tasks(cluster):
    @ray.remote
    class Actor:
        async def f(self):
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                print("Actor task canceled.")

    actor = Actor.remote()
    ref = actor.f.remote()

    # Wait until task is scheduled.
    time.sleep(1)
    ray.cancel(ref)

    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref)  # "Object reference was cancelled."
