"""ray.cancel as Ray's `python/ray/tests/test_cancel.py` checks it (ray-project/ray); each test is named
after the Ray test it follows."""
import time

import pytest

import ray
from suite_utils import Gate, Signal, wait_for_condition


def valid_exceptions(use_force):
    if use_force:
        return (ray.exceptions.RayTaskError, ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)
    return (ray.exceptions.TaskCancelledError,)


@ray.remote
def wait_for(t):
    return ray.get(t[0])


@pytest.mark.parametrize("use_force", [True, False])
def test_cancel_chain(ray_start_regular, use_force):
    signaler = Signal.remote()
    obj1 = wait_for.remote([signaler.wait.remote()])
    obj2 = wait_for.remote([obj1])
    obj3 = wait_for.remote([obj2])
    obj4 = wait_for.remote([obj3])
    assert len(ray.wait([obj1], timeout=0.1)[0]) == 0
    ray.cancel(obj1, force=use_force)
    for ob in [obj1, obj2, obj3, obj4]:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(ob, timeout=30)

    signaler2 = Signal.remote()
    obj1 = wait_for.remote([signaler2.wait.remote()])
    obj2 = wait_for.remote([obj1])
    obj3 = wait_for.remote([obj2])
    obj4 = wait_for.remote([obj3])
    assert len(ray.wait([obj3], timeout=0.1)[0]) == 0
    ray.cancel(obj3, force=use_force)
    for ob in [obj3, obj4]:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(ob, timeout=30)
    ray.get(signaler2.send.remote())
    for ob in [obj1, obj2]:
        assert ray.get(ob, timeout=30) is None


@pytest.mark.parametrize("use_force", [True, False])
def test_cancel_multiple_dependents(ray_start_regular, use_force):
    signaler = Signal.remote()
    head = wait_for.remote([signaler.wait.remote()])
    deps = [wait_for.remote([head]) for _ in range(3)]
    ray.cancel(head, force=use_force)
    for d in deps:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(d, timeout=30)

    head2 = wait_for.remote([signaler.wait.remote()])
    deps2 = [wait_for.remote([head2]) for _ in range(3)]
    for d in deps2:
        ray.cancel(d, force=use_force)
    for d in deps2:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(d, timeout=30)
    ray.get(signaler.send.remote())
    assert ray.get(head2, timeout=30) is None


@pytest.mark.parametrize("use_force", [True, False])
def test_single_cpu_cancel(shutdown_only, use_force, init_kwargs):
    ray.init(num_cpus=1, **init_kwargs)
    signaler = Signal.remote()
    obj1 = wait_for.remote([signaler.wait.remote()])
    obj2 = wait_for.remote([obj1])
    obj3 = wait_for.remote([obj2])
    indep = wait_for.remote([signaler.wait.remote()])
    assert len(ray.wait([obj3], timeout=0.1)[0]) == 0
    ray.cancel(obj3, force=use_force)
    with pytest.raises(valid_exceptions(use_force)):
        ray.get(obj3, timeout=30)
    ray.cancel(obj1, force=use_force)
    for d in [obj1, obj2]:
        with pytest.raises(valid_exceptions(use_force)):
            ray.get(d, timeout=30)
    ray.get(signaler.send.remote())
    assert ray.get(indep, timeout=30) is None


@pytest.mark.parametrize("use_force", [True, False])
def test_comprehensive(ray_start_regular, use_force):
    signaler = Signal.remote()

    @ray.remote
    def wait_for_(t):
        ray.get(t[0])
        return "Result"

    @ray.remote
    def combine(a, b):
        return str(a) + str(b)

    a = wait_for_.remote([signaler.wait.remote()])
    b = wait_for_.remote([signaler.wait.remote()])
    combo = combine.remote(a, b)
    a2 = wait_for_.remote([a])
    assert len(ray.wait([a, b, a2, combo], timeout=1)[0]) == 0
    ray.cancel(a, force=use_force)
    with pytest.raises(valid_exceptions(use_force)):
        ray.get(a, timeout=30)
    with pytest.raises(valid_exceptions(use_force)):
        ray.get(a2, timeout=30)
    ray.get(signaler.send.remote())
    with pytest.raises(valid_exceptions(use_force)):
        ray.get(combo, timeout=30)  # an argument was cancelled
    assert ray.get(b, timeout=30) == "Result"


@pytest.mark.parametrize("use_force", [True, False])
def test_fast(shutdown_only, use_force, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)

    @ray.remote
    def fast(y):
        return y

    signaler = Gate.remote()
    ids = []
    for _ in range(100):
        x = fast.remote("a")
        ray.cancel(x, force=use_force)  # may already be done: either outcome is fine
        ids.append(x)

    @ray.remote
    def wait_for(gate):
        while not ray.get(gate.is_open.remote()):
            time.sleep(0.01)
        return True

    sleeper = wait_for.remote(signaler)
    for obj in ids:
        try:
            ray.get(obj, timeout=30)
        except Exception as e:
            assert isinstance(e, valid_exceptions(use_force))
    ray.get(signaler.open.remote())
    assert ray.get(sleeper, timeout=30)


def test_cancel_running_task_interrupts(ray_start_regular_shared):
    @ray.remote
    def loop():
        while True:
            time.sleep(0.01)

    ref = loop.remote()
    assert not ray.wait([ref], timeout=0.3)[0]
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)


def test_cancel_finished_task_is_noop(ray_start_regular_shared):
    @ray.remote
    def f():
        return 3

    ref = f.remote()
    assert ray.get(ref) == 3
    ray.cancel(ref)
    assert ray.get(ref) == 3


def test_recursive_cancel(ray_start_regular_shared):
    @ray.remote(num_cpus=0)
    def inner():
        while True:
            time.sleep(0.01)

    @ray.remote(num_cpus=0)
    def outer():
        child = inner.remote()
        ray.get(child)

    ref = outer.remote()
    assert not ray.wait([ref], timeout=0.3)[0]
    ray.cancel(ref, recursive=True)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)


def test_cancel_actor_handle_is_an_error(ray_start_regular_shared):
    @ray.remote
    class A:
        pass

    with pytest.raises(TypeError):
        ray.cancel(A.remote())


def test_is_canceled_in_sync_actor(ray_start_regular_shared):
    @ray.remote(max_concurrency=2)
    class Actor:
        def poll(self):
            while not ray.get_runtime_context().is_canceled():
                time.sleep(0.01)
            return "saw it"

    a = Actor.remote()
    ref = a.poll.remote()
    assert not ray.wait([ref], timeout=0.3)[0]
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)


def test_cancel_queued_actor_call(ray_start_regular_shared):
    gate = Gate.remote()

    @ray.remote
    class Actor:
        def block(self, gate):
            while not ray.get(gate.is_open.remote()):
                time.sleep(0.01)
            return "first"

        def second(self):
            return "second"

    a = Actor.remote()
    first = a.block.remote(gate)
    second = a.second.remote()
    ray.cancel(second)
    ray.get(gate.open.remote())
    assert ray.get(first, timeout=30) == "first"
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(second, timeout=30)


def test_cancel_force_kills_worker_task_not_retried(ray_start_regular_shared):
    @ray.remote(max_retries=3)
    def loop():
        while True:
            time.sleep(0.01)

    ref = loop.remote()
    assert not ray.wait([ref], timeout=0.3)[0]
    ray.cancel(ref, force=True)
    with pytest.raises(valid_exceptions(True)):
        ray.get(ref, timeout=30)


def test_cancel_force_on_actor_call_is_an_error(ray_start_regular_shared):
    @ray.remote
    class A:
        def f(self):
            return 1

        def slow(self):
            import time
            time.sleep(2)
            return 2

    a = A.remote()
    ref = a.f.remote()
    ray.get(ref)
    with pytest.raises(ValueError):
        ray.cancel(a.slow.remote(), force=True)
    ray.cancel(ref, force=True)  # one that finished: nothing to cancel, no error (as Ray)
