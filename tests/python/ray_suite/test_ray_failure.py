"""Errors as Ray's `python/ray/tests/test_failure.py`, `test_failure_2.py` and `test_exceptions`-style tests
check them (ray-project/ray); each test is named after the Ray test it follows."""
import os
import sys

import numpy as np
import pytest

import ray
from suite_utils import Counter, Gate, wait_for_condition


def test_failed_task(ray_start_regular_shared):
    @ray.remote
    def throw_exception_fct1():
        raise Exception("Test function 1 intentionally failed.")

    @ray.remote
    def throw_exception_fct2():
        raise Exception("Test function 2 intentionally failed.")

    @ray.remote(num_returns=3)
    def throw_exception_fct3(x):
        raise Exception("Test function 3 intentionally failed.")

    with pytest.raises(Exception, match="Test function 1 intentionally failed."):
        ray.get(throw_exception_fct1.remote())
    with pytest.raises(Exception, match="Test function 2 intentionally failed."):
        ray.get(throw_exception_fct2.remote())
    for ref in throw_exception_fct3.remote(1.0):
        with pytest.raises(Exception, match="Test function 3 intentionally failed."):
            ray.get(ref)

    class CustomException(ValueError):
        def __init__(self, msg):
            super().__init__(msg)
            self.field = 1

        def f(self):
            return 2

    @ray.remote
    def f():
        raise CustomException("This function failed.")

    try:
        ray.get(f.remote())
    except Exception as e:
        assert "This function failed." in str(e)
        assert isinstance(e, ValueError)
        assert isinstance(e, CustomException)
        assert isinstance(e, ray.exceptions.RayTaskError)
        assert "RayTaskError(CustomException)" in repr(e)
        assert e.field == 1
        assert e.f() == 2
    else:
        raise AssertionError("the task's exception was not raised")


def test_get_throws_quickly_when_found_exception(ray_start_regular_shared):
    @ray.remote
    def bad_func1():
        raise Exception("Test function intentionally failed.")

    @ray.remote
    def slow_func(gate):
        import time
        while not ray.get(gate.is_open.remote()):
            time.sleep(0.01)

    gate = Gate.remote()
    with pytest.raises(Exception, match="intentionally failed"):
        ray.get([bad_func1.remote(), slow_func.remote(gate)], timeout=30)
    ray.get(gate.open.remote())


def test_exception_chain(ray_start_regular_shared):
    @ray.remote
    def bar():
        return 1 / 0

    @ray.remote
    def foo():
        return ray.get(bar.remote())

    r = foo.remote()
    with pytest.raises(ZeroDivisionError):
        ray.get(r)


def test_cause_of_task_error(ray_start_regular_shared):
    @ray.remote
    def f():
        raise KeyError("missing")

    try:
        ray.get(f.remote())
    except ray.exceptions.RayTaskError as e:
        cause = e.as_instanceof_cause()
        assert isinstance(cause, KeyError)
        assert isinstance(e.cause, KeyError)
    else:
        raise AssertionError("no error")


def test_exception_with_unpicklable_value(ray_start_regular_shared):
    @ray.remote
    def f():
        import threading

        class Unpicklable(Exception):
            def __init__(self):
                super().__init__("cannot travel")
                self.lock = threading.Lock()

        raise Unpicklable()

    with pytest.raises(ray.exceptions.RayError, match="cannot travel|Unpicklable"):
        ray.get(f.remote())


def test_worker_crash_is_worker_crashed_error(ray_start_regular_shared):
    @ray.remote(max_retries=0)
    def die():
        os._exit(1)

    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(die.remote(), timeout=30)


def test_worker_crash_retried(ray_start_regular_shared):
    counter = Counter.remote()

    @ray.remote(max_retries=2)
    def die_once(counter):
        if ray.get(counter.inc.remote()) == 1:
            os._exit(1)
        return "second try"

    assert ray.get(die_once.remote(counter), timeout=60) == "second try"


def test_retry_exceptions(ray_start_regular_shared):
    counter = Counter.remote()

    @ray.remote(max_retries=3, retry_exceptions=True)
    def flaky(counter):
        if ray.get(counter.inc.remote()) < 3:
            raise ValueError("not yet")
        return "ok"

    assert ray.get(flaky.remote(counter)) == "ok"


def test_retry_exceptions_list(ray_start_regular_shared):
    counter = Counter.remote()

    @ray.remote(max_retries=3, retry_exceptions=[KeyError])
    def flaky(counter):
        if ray.get(counter.inc.remote()) < 2:
            raise ValueError("not retried")
        return "ok"

    with pytest.raises(ValueError):
        ray.get(flaky.remote(counter))


def test_no_retry_on_application_error_by_default(ray_start_regular_shared):
    counter = Counter.remote()

    @ray.remote(max_retries=3)
    def fails(counter):
        ray.get(counter.inc.remote())
        raise ValueError("once")

    with pytest.raises(ValueError):
        ray.get(fails.remote(counter))
    assert ray.get(counter.inc.remote()) == 2  # it ran once


def test_actor_worker_dying(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def kill(self):
            os._exit(0)

    @ray.remote
    def consume(x):
        pass

    a = Actor.remote()
    [obj], _ = ray.wait([a.kill.remote()], timeout=30)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(obj)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(consume.remote(obj))


def test_actor_worker_dying_future_tasks(ray_start_regular_shared):
    @ray.remote(max_restarts=0)
    class Actor:
        def getpid(self):
            return os.getpid()

        def sleep(self):
            import time
            time.sleep(1)

    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    tasks1 = [a.sleep.remote() for _ in range(10)]
    os.kill(pid, 9)
    tasks2 = [a.sleep.remote() for _ in range(10)]
    for obj in tasks1 + tasks2:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(obj, timeout=60)


def test_actor_worker_dying_nothing_in_progress(ray_start_regular_shared):
    @ray.remote(max_restarts=0)
    class Actor:
        def getpid(self):
            return os.getpid()

    a = Actor.remote()
    pid = ray.get(a.getpid.remote())
    os.kill(pid, 9)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(a.getpid.remote(), timeout=30)


def test_get_timeout_error_class(ray_start_regular_shared):
    assert issubclass(ray.exceptions.GetTimeoutError, TimeoutError)
    assert issubclass(ray.exceptions.GetTimeoutError, ray.exceptions.RayError)


def test_task_error_in_dependency(ray_start_regular_shared):
    @ray.remote
    def bad():
        raise IndexError("upstream")

    @ray.remote
    def downstream(x):
        return x

    with pytest.raises(IndexError, match="upstream"):
        ray.get(downstream.remote(bad.remote()))


def test_serialization_error_on_put(ray_start_regular_shared):
    import threading
    with pytest.raises(Exception):
        ray.put(threading.Lock())


def test_serialization_error_on_return(ray_start_regular_shared):
    @ray.remote
    def f():
        import threading
        return threading.Lock()

    with pytest.raises(Exception):
        ray.get(f.remote())


def test_infeasible_task_stays_pending(ray_start_regular_shared):
    @ray.remote(resources={"nonexistent": 1})
    def f():
        return 1

    ref = f.remote()
    ready, _ = ray.wait([ref], timeout=0.5)
    assert ready == []  # Ray keeps an infeasible task pending (and warns)


def test_object_lost_after_free_like_kill(ray_start_regular_shared):
    @ray.remote
    class Holder:
        def make(self):
            return np.zeros(1024 * 1024)

    h = Holder.remote()
    ref = h.make.remote()
    assert ray.get(ref).shape == (1024 * 1024,)
    ray.kill(h)
    # The value is in the store: a get after the actor died still returns it.
    assert ray.get(ref).shape == (1024 * 1024,)
