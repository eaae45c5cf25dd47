"""Actor deaths, restarts and retries as Ray's `python/ray/tests/test_actor_failures.py`, `test_actor.py`
and `test_actor_retry*.py` check them (ray-project/ray); each test is named after the Ray test it follows."""
import os

import pytest

import ray
from suite_utils import Counter, wait_for_condition


def test_kill(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def hang(self):
            import time
            while True:
                time.sleep(0.1)

        def ping(self):
            return 1

    actor = Actor.remote()
    ref = actor.hang.remote()
    ready, _ = ray.wait([ref], timeout=0.2)
    assert not ready
    ray.kill(actor)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(ref, timeout=30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.ping.remote(), timeout=30)


def test_kill_non_actor_is_an_error(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises((ValueError, TypeError)):
        ray.kill(f.remote())


def test_actor_restart(shutdown_only, init_kwargs):
    ray.init(num_cpus=1, **init_kwargs)

    @ray.remote(max_restarts=1, max_task_retries=0)
    class RestartableActor:
        def __init__(self):
            self.value = 0

        def increase(self):
            self.value += 1
            return self.value

        def pid(self):
            return os.getpid()

        def exit(self):
            os._exit(1)

    actor = RestartableActor.remote()
    assert ray.get(actor.increase.remote()) == 1
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.exit.remote())
    # The restarted actor starts from its constructor again.
    wait_for_condition(lambda: ray.get(actor.increase.remote(), timeout=10) == 1, timeout=30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.exit.remote())
    # No restart left.
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.increase.remote(), timeout=30)


def test_actor_task_retries(shutdown_only, init_kwargs):
    ray.init(num_cpus=1, **init_kwargs)

    @ray.remote(max_restarts=-1, max_task_retries=-1)
    class Flaky:
        def __init__(self, counter):
            self.counter = counter

        def crash_first(self):
            if ray.get(self.counter.inc.remote()) == 1:
                os._exit(1)
            return "done"

    counter = Counter.remote()  # (held here: Ray ends an actor whose creator dropped its handle)
    actor = Flaky.remote(counter)
    assert ray.get(actor.crash_first.remote(), timeout=60) == "done"


def test_exit_actor(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def exit(self):
            ray.actor.exit_actor()

        def ping(self):
            return 1

    a = Actor.remote()
    assert ray.get(a.ping.remote()) == 1
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.exit.remote(), timeout=30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.ping.remote(), timeout=30)


def test_actor_died_error_is_ray_actor_error(ray_start_regular_shared):
    assert issubclass(ray.exceptions.ActorDiedError, ray.exceptions.RayActorError)
    assert issubclass(ray.exceptions.RayActorError, ray.exceptions.RayError)
    assert issubclass(ray.exceptions.RayTaskError, ray.exceptions.RayError)


def test_actor_killed_error_message(ray_start_regular_shared):
    """Ray's test_actor_failures / test_task_events: a call to a killed actor says why, in Ray's words."""
    @ray.remote
    class Actor:
        def check_alive(self):
            return True

    a = Actor.remote()
    assert ray.get(a.check_alive.remote())
    ray.kill(a)
    with pytest.raises(ray.exceptions.RayActorError, match="it was killed by `ray.kill"):
        ray.get(a.check_alive.remote(), timeout=30)


def test_actor_method_retry_exceptions(ray_start_regular_shared):
    """Ray's test_actor_retry: @ray.method(retry_exceptions=...) runs a call again on those exceptions,
    up to max_task_retries times; other exceptions reach the caller at once."""
    @ray.remote(max_task_retries=3)
    class Flaky:
        def __init__(self):
            self.calls = 0

        @ray.method(retry_exceptions=[ValueError])
        def succeed_third(self):
            self.calls += 1
            if self.calls < 3:
                raise ValueError("not yet")
            return self.calls

        @ray.method(retry_exceptions=[ValueError])
        def wrong_kind(self):
            self.calls += 1
            raise KeyError("not retried")

        def count(self):
            return self.calls

    a = Flaky.remote()
    assert ray.get(a.succeed_third.remote()) == 3
    with pytest.raises(KeyError):
        ray.get(a.wrong_kind.remote())
    assert ray.get(a.count.remote()) == 4


def test_actor_method_retry_exceptions_limit(ray_start_regular_shared):
    @ray.remote
    class AlwaysFails:
        def __init__(self):
            self.calls = 0

        @ray.method(retry_exceptions=True, max_task_retries=2)
        def fail(self):
            self.calls += 1
            raise RuntimeError("always")

        def count(self):
            return self.calls

    a = AlwaysFails.remote()
    with pytest.raises(RuntimeError):
        ray.get(a.fail.remote())
    assert ray.get(a.count.remote()) == 3  # the first run and two retries


def test_async_actor_method_retry_exceptions(ray_start_regular_shared):
    @ray.remote
    class AsyncFlaky:
        def __init__(self):
            self.calls = 0

        @ray.method(retry_exceptions=True, max_task_retries=5)
        async def succeed_second(self):
            self.calls += 1
            if self.calls < 2:
                raise ValueError("first")
            return self.calls

    assert ray.get(AsyncFlaky.remote().succeed_second.remote()) == 2


def test_actor_method_options_retry_exceptions(ray_start_regular_shared):
    @ray.remote(max_task_retries=2)
    class Flaky:
        def __init__(self):
            self.calls = 0

        def succeed_second(self):
            self.calls += 1
            if self.calls < 2:
                raise ValueError("first")
            return self.calls

    a = Flaky.remote()
    assert ray.get(a.succeed_second.options(retry_exceptions=True).remote()) == 2
    b = Flaky.remote()
    with pytest.raises(ValueError):
        ray.get(b.succeed_second.remote())  # without retry_exceptions: not retried
