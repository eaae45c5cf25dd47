"""ray.get_runtime_context() as Ray's `python/ray/tests/test_runtime_context.py` checks it (ray-project/ray);
each test is named after the Ray test it follows."""
import pytest

import ray


def test_get_context_dict(ray_start_regular_shared):
    context = ray.get_runtime_context().get()
    assert set(context) >= {"job_id", "node_id", "namespace"}
    assert "task_id" not in context and "actor_id" not in context

    @ray.remote
    class Actor:
        def check(self, node_id, job_id):
            c = ray.get_runtime_context().get()
            assert c["node_id"] == node_id and c["job_id"] == job_id
            assert "actor_id" in c and "task_id" in c
            return True

    @ray.remote
    def task(node_id, job_id):
        c = ray.get_runtime_context().get()
        assert c["node_id"] == node_id and c["job_id"] == job_id
        assert "task_id" in c and "actor_id" not in c
        return True

    assert ray.get(task.remote(context["node_id"], context["job_id"]))
    assert ray.get(Actor.remote().check.remote(context["node_id"], context["job_id"]))


def test_current_actor(ray_start_regular_shared):
    @ray.remote
    class Echo:
        def __init__(self):
            pass

        def echo(self, s):
            self_actor = ray.get_runtime_context().current_actor
            return self_actor.echo2.remote(s)

        def echo2(self, s):
            return s

    e = Echo.remote()
    obj = e.echo.remote("hello")
    assert ray.get(ray.get(obj)) == "hello"


def test_get_task_id_and_actor_id(ray_start_regular_shared):
    ctx = ray.get_runtime_context()
    assert ctx.get_actor_id() is None
    assert ctx.get_task_id() is None

    @ray.remote
    def f():
        c = ray.get_runtime_context()
        return c.get_task_id(), c.get_actor_id()

    task_id, actor_id = ray.get(f.remote())
    assert isinstance(task_id, str) and actor_id is None

    @ray.remote
    class A:
        def ids(self):
            c = ray.get_runtime_context()
            return c.get_task_id(), c.get_actor_id()

    a = A.remote()
    task_id1, actor_id1 = ray.get(a.ids.remote())
    task_id2, actor_id2 = ray.get(a.ids.remote())
    assert actor_id1 == actor_id2 == a._actor_id.hex()
    assert task_id1 != task_id2


def test_get_node_id(ray_start_regular_shared):
    node_id = ray.get_runtime_context().get_node_id()
    assert isinstance(node_id, str) and len(node_id) > 0

    @ray.remote
    def f():
        return ray.get_runtime_context().get_node_id()

    assert ray.get(f.remote()) == node_id
    assert node_id in [n["NodeID"] if "NodeID" in n else n.get("node_id") for n in ray.nodes()]


def test_get_job_id(ray_start_regular_shared):
    job_id = ray.get_runtime_context().get_job_id()

    @ray.remote
    def f():
        return ray.get_runtime_context().get_job_id()

    assert ray.get(f.remote()) == job_id


def test_get_task_name(ray_start_regular_shared):
    @ray.remote
    def my_task():
        return ray.get_runtime_context().get_task_name()

    @ray.remote
    class MyActor:
        def method(self):
            return ray.get_runtime_context().get_task_name()

    assert ray.get(my_task.options(name="renamed").remote()) == "renamed"
    assert ray.get(my_task.remote()).endswith("my_task")
    assert ray.get(MyActor.remote().method.remote()).endswith("MyActor.method")
    assert ray.get_runtime_context().get_task_name() is None


def test_get_assigned_resources(ray_start_regular_shared):
    @ray.remote(num_cpus=2)
    def f():
        return ray.get_runtime_context().get_assigned_resources()

    assert ray.get(f.remote()) == {"CPU": 2.0}


def test_runtime_context_namespace(shutdown_only, init_kwargs):
    ray.init(namespace="runtime-context-ns", **init_kwargs)
    assert ray.get_runtime_context().namespace == "runtime-context-ns"

    @ray.remote
    def f():
        return ray.get_runtime_context().namespace

    assert ray.get(f.remote()) == "runtime-context-ns"


def test_was_current_actor_reconstructed(shutdown_only, init_kwargs):
    ray.init(num_cpus=1, **init_kwargs)

    @ray.remote(max_restarts=10)
    class A:
        def __init__(self):
            self.reconstructed = ray.get_runtime_context().was_current_actor_reconstructed

        def get_was_reconstructed(self):
            return self.reconstructed

        def update_was_reconstructed(self):
            return ray.get_runtime_context().was_current_actor_reconstructed

        def get_pid(self):
            import os
            return os.getpid()

    a = A.remote()
    assert ray.get(a.get_was_reconstructed.remote()) is False
    assert ray.get(a.update_was_reconstructed.remote()) is False
    pid = ray.get(a.get_pid.remote())
    import os
    import signal
    os.kill(pid, signal.SIGKILL)

    def reconstructed():
        try:
            return ray.get(a.get_was_reconstructed.remote(), timeout=5) is True
        except ray.exceptions.RayActorError:
            return False

    from suite_utils import wait_for_condition
    wait_for_condition(reconstructed, timeout=30)
    assert ray.get(a.update_was_reconstructed.remote()) is True


def test_is_canceled_outside_task(ray_start_regular_shared):
    with pytest.raises(RuntimeError):
        ray.get_runtime_context().is_canceled()


def test_actor_id_property(ray_start_regular_shared):
    @ray.remote
    class A:
        def ids(self):
            c = ray.get_runtime_context()
            return c.actor_id.hex(), c.get_actor_id()

    prop, getter = ray.get(A.remote().ids.remote())
    assert prop == getter


def test_gpu_ids_empty_without_gpus(ray_start_regular_shared):
    @ray.remote
    def f():
        return ray.get_gpu_ids(), ray.get_runtime_context().get_accelerator_ids().get("GPU", [])

    assert ray.get(f.remote()) == ([], [])
