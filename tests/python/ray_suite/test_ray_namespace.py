"""Namespaces as Ray's `python/ray/tests/test_namespace.py` checks them (ray-project/ray); each test is
named after the Ray test it follows. Ray's tests start second drivers as subprocesses; so do these."""
import os
import subprocess
import sys

import pytest

import ray

HERE = os.path.dirname(os.path.abspath(__file__))


def run_driver(script, address, namespace=None):
    """A second driver on the same cluster, as a user's program is (its `import ray` resolves as ours)."""
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", "")
    code = f"import ray\nray.init(address={address!r}, namespace={namespace!r})\n" + script
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def cluster_address(context):
    return context["address"] if isinstance(context, dict) or hasattr(context, "__getitem__") else context


def test_isolation(shutdown_only, init_kwargs):
    info = ray.init(namespace="namespace", **init_kwargs)
    address = cluster_address(info)

    @ray.remote
    class Actor:
        def ping(self):
            return "pong from other job"

    actor = Actor.options(name="Pinger", lifetime="detached").remote()
    ray.get(actor.ping.remote())
    out = run_driver("""
@ray.remote
class Actor:
    def ping(self):
        return "pong"
try:
    ray.get_actor("Pinger")
    print("found")
except ValueError:
    print("missing")
probe = Actor.options(name="Pinger").remote()
print(ray.get(probe.ping.remote()))
""", address)
    assert "missing" in out and "pong" in out
    # The first driver's actor is untouched.
    assert ray.get(actor.ping.remote()) == "pong from other job"
    ray.kill(actor)


def test_cross_namespace(shutdown_only, init_kwargs):
    info = ray.init(namespace="namespace", **init_kwargs)

    @ray.remote
    class Actor:
        def ping(self):
            return "pong"

    actor = Actor.options(name="Pinger", lifetime="detached").remote()
    ray.get(actor.ping.remote())
    out = run_driver("""
print(ray.get(ray.get_actor("Pinger", namespace="namespace").ping.remote()))
""", cluster_address(info))
    assert "pong" in out
    ray.kill(actor)


def test_namespace_in_init(shutdown_only, init_kwargs):
    ray.init(namespace="abc", **init_kwargs)
    assert ray.get_runtime_context().namespace == "abc"


def test_default_namespace_is_anonymous(shutdown_only, init_kwargs):
    ray.init(**init_kwargs)
    ns = ray.get_runtime_context().namespace
    assert isinstance(ns, str) and ns


def test_namespace_validation(shutdown_only, init_kwargs):
    with pytest.raises(TypeError):
        ray.init(namespace=123, **init_kwargs)


def test_get_actor_in_namespace_from_task(shutdown_only, init_kwargs):
    ray.init(namespace="task-ns", **init_kwargs)

    @ray.remote
    class Actor:
        def ping(self):
            return 1

    a = Actor.options(name="found-in-task").remote()

    @ray.remote
    def lookup():
        return ray.get(ray.get_actor("found-in-task").ping.remote())

    assert ray.get(lookup.remote()) == 1
    del a


def test_detached_actor_survives_driver(shutdown_only, init_kwargs):
    info = ray.init(namespace="detached-ns", **init_kwargs)
    run_driver("""
@ray.remote
class Keeper:
    def value(self):
        return 42
Keeper.options(name="keeper", lifetime="detached").remote()
""", cluster_address(info), "detached-ns")
    from suite_utils import wait_for_condition
    wait_for_condition(lambda: ray.get(ray.get_actor("keeper").value.remote()) == 42, timeout=30)
    ray.kill(ray.get_actor("keeper"))


def test_non_detached_actor_dies_with_driver(shutdown_only, init_kwargs):
    info = ray.init(namespace="owned-ns", **init_kwargs)
    run_driver("""
@ray.remote
class Owned:
    def value(self):
        return 1
a = Owned.options(name="owned").remote()
ray.get(a.value.remote())
""", cluster_address(info), "owned-ns")
    from suite_utils import wait_for_condition

    def gone():
        try:
            ray.get_actor("owned")
            return False
        except ValueError:
            return True

    wait_for_condition(gone, timeout=30)
