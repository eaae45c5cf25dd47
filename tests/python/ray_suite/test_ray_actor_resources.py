"""What an actor holds and how many calls it runs at once, as Ray's `python/ray/tests/test_actor_resources.py`
and `test_actor.py` check them (ray-project/ray); each test is named after the Ray test it follows."""
import ray
from suite_utils import wait_for_condition


def test_actor_resources_held(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self):
            return 1

    holders = [Holder.remote() for _ in range(2)]
    ray.get([h.ping.remote() for h in holders])
    wait_for_condition(lambda: ray.available_resources().get("CPU", 0) == 0)
    ray.kill(holders[0])
    wait_for_condition(lambda: ray.available_resources().get("CPU", 0) == 1)


def test_actor_default_num_cpus_zero_when_running(shutdown_only, init_kwargs):
    ray.init(num_cpus=1, **init_kwargs)

    @ray.remote
    class Light:
        def ping(self):
            return 1

    # Ray: an actor needs 1 CPU to be placed and 0 while it runs, so many fit on one CPU.
    actors = [Light.remote() for _ in range(4)]
    assert ray.get([a.ping.remote() for a in actors]) == [1] * 4


def test_actor_max_concurrency_threaded(ray_start_regular_shared):
    @ray.remote(max_concurrency=3)
    class Threaded:
        def __init__(self):
            import threading
            self.barrier = threading.Barrier(3, timeout=30)

        def meet(self):
            self.barrier.wait()
            return True

    a = Threaded.remote()
    assert ray.get([a.meet.remote() for _ in range(3)], timeout=60) == [True] * 3


def test_actor_options_override(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    class Actor:
        def resources(self):
            return ray.get_runtime_context().get_assigned_resources()

    a = Actor.options(num_cpus=1).remote()
    assert ray.get(a.resources.remote()).get("CPU") == 1
