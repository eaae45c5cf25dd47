"""The options of remote functions and actor classes, after Ray's python/ray/tests/test_basic_2.py,
test_ray_option.py (ray._private.ray_option_utils' checks, as a user meets them) and the
@ray.remote / .options() reference: what each option does, and the clear errors for bad ones."""
import sys

import pytest

import ray


def test_decorator_with_and_without_arguments(ray_start_regular_shared):
    @ray.remote
    def a():
        return "a"

    @ray.remote(num_cpus=0.5)
    def c():
        return "c"

    assert ray.get([a.remote(), c.remote()]) == ["a", "c"]


def test_options_do_not_change_the_original(ray_start_regular_shared):
    @ray.remote(num_returns=1)
    def f():
        return 1, 2

    g = f.options(num_returns=2)
    x, y = g.remote()
    assert ray.get([x, y]) == [1, 2]
    assert ray.get(f.remote()) == (1, 2)


def test_options_name_is_the_task_name(ray_start_regular_shared):
    @ray.remote
    def f():
        return ray.get_runtime_context().get_task_name()

    assert ray.get(f.options(name="my-task").remote()) == "my-task"


def test_num_returns_zero_returns_none(ray_start_regular_shared):
    @ray.remote(num_returns=0)
    def f():
        return None

    assert f.remote() is None


def test_num_returns_mismatch_is_an_error(ray_start_regular_shared):
    @ray.remote(num_returns=2)
    def f():
        return 1, 2, 3

    a, b = f.remote()
    with pytest.raises(Exception):
        ray.get(a)


def test_num_cpus_must_be_a_number(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises((ValueError, TypeError)):
        f.options(num_cpus="two").remote()


def test_num_gpus_negative_is_an_error(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises(ValueError):
        f.options(num_gpus=-1).remote()


def test_cpu_in_resources_is_an_error(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises(ValueError):
        f.options(resources={"CPU": 1}).remote()
    with pytest.raises(ValueError):
        f.options(resources={"GPU": 1}).remote()


def test_bundle_resource_name_is_reserved(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises(ValueError):
        f.options(resources={"bundle": 1}).remote()


def test_negative_custom_resource_is_an_error(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises(ValueError):
        f.options(resources={"Custom": -1}).remote()


def test_max_retries_on_actor_class_is_an_error(ray_start_regular_shared):
    with pytest.raises((ValueError, TypeError)):
        @ray.remote(max_retries=2)
        class A:
            pass


def test_max_restarts_on_function_is_an_error(ray_start_regular_shared):
    with pytest.raises((ValueError, TypeError)):
        @ray.remote(max_restarts=2)
        def f():
            return 1


def test_actor_options_unknown_keyword(ray_start_regular_shared):
    @ray.remote
    class A:
        pass

    with pytest.raises((ValueError, TypeError)):
        A.options(not_an_option=1)


def test_actor_options_num_cpus(ray_start_regular_shared):
    @ray.remote
    class A:
        def cpus(self):
            return ray.get_runtime_context().get_assigned_resources().get("CPU")

    a = A.options(num_cpus=2).remote()
    assert ray.get(a.cpus.remote()) == 2


def test_actor_default_holds_no_cpu(ray_start_regular_shared):
    """Ray: an actor takes 1 CPU to be scheduled and 0 while it lives; 10 actors fit on 4 CPUs."""
    @ray.remote
    class A:
        def ping(self):
            return 1

    actors = [A.remote() for _ in range(10)]
    assert ray.get([a.ping.remote() for a in actors], timeout=60) == [1] * 10


def test_actor_options_name_and_lookup(ray_start_regular_shared):
    @ray.remote
    class A:
        def ping(self):
            return "pong"

    a = A.options(name="options-test-actor").remote()
    assert ray.get(ray.get_actor("options-test-actor").ping.remote()) == "pong"
    ray.kill(a)


def test_actor_lifetime_must_be_known(ray_start_regular_shared):
    @ray.remote
    class A:
        pass

    with pytest.raises((ValueError, TypeError)):
        A.options(lifetime="forever").remote()


def test_method_num_returns(ray_start_regular_shared):
    @ray.remote
    class A:
        @ray.method(num_returns=2)
        def two(self):
            return 1, 2

    a = A.remote()
    x, y = a.two.remote()
    assert ray.get([x, y]) == [1, 2]
    p, q, r = a.two.options(num_returns=3).remote()
    with pytest.raises(Exception):
        ray.get(p)


def test_remote_function_options_memory(ray_start_regular_shared):
    @ray.remote(memory=100 * 1024 * 1024)
    def f():
        return 1

    assert ray.get(f.remote(), timeout=30) == 1


def test_scheduling_strategy_default_and_spread(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    assert ray.get(f.options(scheduling_strategy="DEFAULT").remote()) == 1
    assert ray.get(f.options(scheduling_strategy="SPREAD").remote()) == 1


def test_unknown_scheduling_strategy_is_an_error(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises((ValueError, TypeError)):
        f.options(scheduling_strategy="NOWHERE").remote()


if __name__ == "__main__":
    sys.exit(pytest.main(["-sv", __file__]))
