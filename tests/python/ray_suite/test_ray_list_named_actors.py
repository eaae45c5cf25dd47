"""ray.util.list_named_actors as Ray's `python/ray/tests/test_list_actors.py`, `test_list_actors_2.py`,
`test_list_actors_3.py` and `test_list_actors_4.py` check it (ray-project/ray); each test is named after the
Ray test it follows. Ray's tests start second drivers with `run_string_as_driver`; so do these (suite_utils).

Left out: `test_list_named_actors_basic_local_mode` (local mode: gone from Ray, ray-project/ray#60647, and
never in phalanx; its checks are the first half of `test_list_named_actors_basic`) and
`test_list_named_actors_timeout` (test_failure_2.py: a GCS reply delayed through Ray's fault-injection
setting `RAY_testing_asio_delay_us` and `_system_config`)."""
import os

import ray
from suite_utils import phalanx_differs, run_string_as_driver, wait_for_condition


def test_list_named_actors_basic(ray_start_regular):
    @ray.remote
    class A:
        pass

    a = A.remote()
    assert not ray.util.list_named_actors()

    a = A.options(name="hi").remote()
    assert len(ray.util.list_named_actors()) == 1
    assert "hi" in ray.util.list_named_actors()

    b = A.options(name="hi2").remote()
    assert len(ray.util.list_named_actors()) == 2
    assert "hi" in ray.util.list_named_actors()
    assert "hi2" in ray.util.list_named_actors()

    def one_actor():
        actors = ray.util.list_named_actors()
        return actors == ["hi2"]

    del a
    wait_for_condition(one_actor)

    del b
    wait_for_condition(lambda: not ray.util.list_named_actors())


def test_list_named_actors_restarting_actor(ray_start_regular):
    @ray.remote(max_restarts=-1)
    class A:
        def __init__(self):
            os._exit(0)

    a = A.options(name="hi").remote()
    for _ in range(10000):
        assert ray.util.list_named_actors() == ["hi"]

    del a
    wait_for_condition(lambda: not ray.util.list_named_actors())


def test_list_named_actors_ray_kill(ray_start_regular):
    """Names are returned even while actors are restarting."""

    @ray.remote(max_restarts=-1)
    class A:
        def __init__(self):
            pass

    a = A.options(name="hi").remote()
    assert ray.util.list_named_actors() == ["hi"]
    ray.kill(a, no_restart=False)
    assert ray.util.list_named_actors() == ["hi"]
    ray.kill(a, no_restart=True)
    assert not ray.util.list_named_actors()


def test_list_named_actors_detached(ray_start_regular):
    """Names are returned for detached actors until killed."""
    address = ray_start_regular["address"]
    # Ray's fixtures start the driver in namespace "default_test_namespace", which Ray's script joins; the
    # suite's leave the namespace to ray.init, so the script joins this driver's namespace, whatever it is.
    namespace = ray.get_runtime_context().namespace

    driver_script = """
import ray
ray.init(address="{}", namespace="{}")

@ray.remote
class A:
    pass

A.options(name="hi", lifetime="detached").remote()
a = A.options(name="sad").remote()

assert len(ray.util.list_named_actors()) == 2
assert "hi" in ray.util.list_named_actors()
assert "sad" in ray.util.list_named_actors()
""".format(address, namespace)

    run_string_as_driver(driver_script)

    assert ray.util.list_named_actors() == ["hi"]


def test_list_named_actors_namespace(ray_start_regular):
    """Actor names are filtered on namespace by default."""
    address = ray_start_regular["address"]

    driver_script_1 = """
import ray
ray.init(address="{}", namespace="test")

@ray.remote
class A:
    pass

A.options(name="hi", lifetime="detached").remote()

assert len(ray.util.list_named_actors()) == 1
assert ray.util.list_named_actors() == ["hi"]
assert ray.util.list_named_actors(all_namespaces=True) == \\
    [dict(name="hi", namespace="test")]
""".format(address)

    run_string_as_driver(driver_script_1)

    assert not ray.util.list_named_actors()
    assert ray.util.list_named_actors(all_namespaces=True) == [{"name": "hi", "namespace": "test"}]

    driver_script_2 = """
import ray
ray.init(address="{}", namespace="test")

assert ray.util.list_named_actors() == ["hi"]
assert ray.util.list_named_actors(all_namespaces=True) == \\
    [dict(name="hi", namespace="test")]
ray.kill(ray.get_actor("hi"), no_restart=True)
assert not ray.util.list_named_actors()
""".format(address)

    run_string_as_driver(driver_script_2)
    assert not ray.util.list_named_actors()
    assert not ray.util.list_named_actors(all_namespaces=True)
