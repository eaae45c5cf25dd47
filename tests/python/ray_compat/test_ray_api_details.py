"""Details of Ray's public API that Ray's own tests rely on, with `import phalanx as ray` (issue 36).

Each test names the Ray test or page it follows (ray-project/ray, python/ray/tests/...); where Ray's test
reads Ray's internals, the same behaviour is asserted through the public API."""
import os

import pytest

import phalanx as ray
from phalanx.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def test_init_returns_rays_context_object(fresh_cluster):
    """test_basic.py / docs "ray.init": ctx.address_info, ctx["address"], a context manager."""
    ray.shutdown()
    with ray.init(num_cpus=1) as ctx:
        assert ctx["address"] == ctx.address_info["address"] == ctx["gcs_address"]
        assert ctx.address_info["session_dir"] and ctx.dashboard_url is None
        assert ray.is_initialized()
    assert not ray.is_initialized()


def test_init_namespace_must_be_a_string():
    """test_namespace.py: ray.init(namespace=123) is a TypeError."""
    ray.shutdown()
    with pytest.raises(TypeError, match="namespace must be a str"):
        ray.init(namespace=123)
    assert not ray.is_initialized()


def test_runtime_context_dict_and_properties(cluster):
    """test_runtime_context.py: get() has no task or actor keys in a driver; the properties beside the
    get_* methods, with Ray's .hex()."""
    ctx = ray.get_runtime_context()
    assert set(ctx.get()) == {"job_id", "node_id", "namespace"}
    assert ctx.node_id.hex() == ctx.get_node_id() and ctx.job_id.hex() == ctx.get_job_id()
    assert ctx.task_id is None and ctx.actor_id is None and ctx.get_task_name() is None

    @ray.remote
    def inside():
        c = ray.get_runtime_context()
        return set(c.get()), c.get_task_name(), c.task_id.hex() == c.get_task_id()

    keys, name, same = ray.get(inside.remote())
    assert keys == {"job_id", "node_id", "namespace", "task_id"} and name == "test_runtime_context_dict_and_" \
        "properties.<locals>.inside" and same
    assert ray.get(inside.options(name="custom").remote())[1] == "custom"

    @ray.remote
    class A:
        def keys(self):
            c = ray.get_runtime_context()
            return set(c.get()), c.get_task_name()

    keys, name = ray.get(A.remote().keys.remote())
    assert keys == {"job_id", "node_id", "namespace", "task_id", "actor_id"}
    assert name.endswith("A.keys")


def test_remote_with_empty_parentheses(cluster):
    @ray.remote()
    def f():
        return 1

    @ray.remote()
    class C:
        def g(self):
            return 2

    assert ray.get(f.remote()) == 1 and ray.get(C.remote().g.remote()) == 2


def test_available_resources_leaves_out_what_is_used_up(fresh_cluster):
    """test_basic.py's resource checks: a resource of which nothing is free is not listed."""
    fresh_cluster(num_cpus=1)

    @ray.remote(num_cpus=1)
    class Holder:
        def ready(self):
            return True

    h = Holder.remote()
    ray.get(h.ready.remote())
    from conftest import wait_until
    wait_until(lambda: "CPU" not in ray.available_resources(), what="CPU gone from available_resources()")
    assert ray.cluster_resources()["CPU"] == 1.0
    ray.kill(h)


def test_nodes_offer_memory_by_default(cluster):
    """Ray's nodes offer a "memory" resource; a task asking memory= runs where it fits."""
    assert ray.cluster_resources().get("memory", 0) > 0

    @ray.remote(memory=64 * 1024 * 1024)
    def small():
        return "ran"

    assert ray.get(small.remote(), timeout=60) == "ran"


def test_placement_group_strategy_with_no_group_is_the_default(cluster):
    """PlacementGroupSchedulingStrategy(placement_group=None): no group, the default placement."""
    @ray.remote
    def f():
        return 3

    s = PlacementGroupSchedulingStrategy(placement_group=None)
    assert ray.get(f.options(scheduling_strategy=s).remote(), timeout=60) == 3


def test_reserved_resource_names_are_refused():
    with pytest.raises(ValueError, match="reserved"):
        ray.remote(resources={"bundle": 1})(lambda: 1)


def test_method_takes_enable_task_events(cluster):
    @ray.remote
    class A:
        @ray.method(enable_task_events=False)
        def f(self):
            return 1

    assert ray.get(A.remote().f.remote()) == 1


def test_retry_exceptions(cluster, tmp_path):
    """test_failure.py (test_retry_application_level_error and friends): retry_exceptions=True or a list
    of classes retries an application error up to max_retries; other errors are not retried."""
    counter = str(tmp_path / "count")

    @ray.remote(max_retries=2, retry_exceptions=True)
    def flaky(path):
        k = int(open(path).read()) if os.path.exists(path) else 0
        with open(path, "w") as f:
            f.write(str(k + 1))
        if k < 2:
            raise ValueError(f"attempt {k}")
        return k

    assert ray.get(flaky.remote(counter), timeout=60) == 2

    class Retryable(Exception):
        pass

    @ray.remote(max_retries=3)
    def picky(path, kind):
        k = int(open(path).read()) if os.path.exists(path) else 0
        with open(path, "w") as f:
            f.write(str(k + 1))
        raise kind(f"attempt {k}")

    only = picky.options(retry_exceptions=[Retryable])
    with pytest.raises(Retryable):
        ray.get(only.remote(str(tmp_path / "a"), Retryable), timeout=60)
    assert open(tmp_path / "a").read() == "4"  # the first run and 3 retries
    with pytest.raises(KeyError):
        ray.get(only.remote(str(tmp_path / "b"), KeyError), timeout=60)
    assert open(tmp_path / "b").read() == "1"  # not on the list: not retried
    with pytest.raises(KeyError):
        ray.get(picky.remote(str(tmp_path / "c"), KeyError), timeout=60)
    assert open(tmp_path / "c").read() == "1"  # retry_exceptions off by default
    with pytest.raises(TypeError, match="retry_exceptions"):
        ray.remote(retry_exceptions="yes")(lambda: 1)


@ray.remote
class Counted:
    """At module level: its methods' globals hold the ActorClass, which cloudpickle must still pickle by
    value (a worker cannot import this test module)."""
    BASE = 5

    @staticmethod
    def seven():
        return 7

    @classmethod
    def eight(cls):
        return cls.BASE + 3

    def total(self):
        return Counted.BASE + Counted.seven() + Counted.eight()

    def more(self):
        return 1


def test_actor_class_attributes_through_the_class_name(cluster):
    """Ray's ActorClass forwards the class's attributes: a method reaching `Cls.X`, `Cls.static()` and
    `Cls.classmethod()`. The actor's own methods are its calls, not forwarded."""
    assert ray.get(Counted.remote().total.remote(), timeout=60) == 20
    assert Counted.BASE == 5 and Counted.seven() == 7 and Counted.eight() == 8
    with pytest.raises(AttributeError):
        Counted.more


def test_task_error_is_ray_task_error_and_its_cause(cluster):
    """test_failure.py / test_exceptions: a plain Exception comes back as RayTaskError and the cause's
    class; repr says RayTaskError; as_instanceof_cause."""
    @ray.remote
    def bad():
        raise Exception("plain")

    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(bad.remote())
    e = info.value
    assert isinstance(e, Exception) and repr(e).startswith("RayTaskError(Exception)")
    cause = e.as_instanceof_cause()
    assert isinstance(cause, ray.exceptions.RayTaskError) and isinstance(cause, Exception)


def test_static_generator_that_raises_keeps_the_items_before(cluster):
    """test_generators.py: num_returns=N and an error after some items: those keep their values, the error
    goes into the rest. More than N: the rest are dropped."""
    @ray.remote(num_returns=3)
    def gen():
        yield 1
        raise ValueError("mid")

    a, b, c = gen.remote()
    assert ray.get(a) == 1
    for r in (b, c):
        with pytest.raises(ValueError, match="mid"):
            ray.get(r)

    @ray.remote(num_returns=2)
    def many():
        yield from range(5)

    assert ray.get(many.remote()) == [0, 1]


def test_get_actor_of_a_missing_name_says_rays_words(cluster):
    """test_actor.py's test_actor_namespace_access matches "Failed to look up actor with name.*"."""
    @ray.remote
    class A:
        def hi(self):
            return "hi"

    a = A.options(name="actor_name", namespace="namespace").remote()
    assert ray.get(ray.get_actor("actor_name", namespace="namespace").hi.remote()) == "hi"
    with pytest.raises(ValueError, match=r"Failed to look up actor with name.*"):
        ray.get_actor("actor_name")  # another namespace: this job's own
    ray.kill(a)
