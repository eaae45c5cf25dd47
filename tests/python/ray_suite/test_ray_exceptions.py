"""What a user's exception becomes, after Ray's python/ray/tests/test_traceback.py, test_exceptions.py
and the "Exceptions" page of Ray's API reference: the error classes and their hierarchy, the cause kept,
the remote traceback in the text, errors across nested tasks and every kind of actor."""
import sys

import pytest

import ray


class CustomError(Exception):
    """Two arguments to __init__: pickled with __reduce__, as Ray's serialization page asks of such classes."""

    def __init__(self, code, detail):
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail

    def __reduce__(self):
        return CustomError, (self.code, self.detail)


def test_exception_hierarchy():
    ex = ray.exceptions
    assert issubclass(ex.RayTaskError, ex.RayError)
    assert issubclass(ex.RayActorError, ex.RayError)
    assert issubclass(ex.ActorDiedError, ex.RayActorError)
    assert issubclass(ex.GetTimeoutError, ex.RayError)
    assert issubclass(ex.GetTimeoutError, TimeoutError)
    assert issubclass(ex.TaskCancelledError, ex.RayError)
    assert issubclass(ex.ObjectLostError, ex.RayError)
    assert issubclass(ex.WorkerCrashedError, ex.RayError)
    assert issubclass(ex.RayError, Exception)


def test_task_error_text_has_the_remote_traceback(ray_start_regular_shared):
    @ray.remote
    def failing_function_name():
        raise ValueError("the message")

    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(failing_function_name.remote())
    text = str(info.value)
    assert "failing_function_name" in text
    assert "ValueError" in text
    assert "the message" in text
    assert 'raise ValueError("the message")' in text


def test_task_error_is_an_instance_of_the_cause(ray_start_regular_shared):
    @ray.remote
    def f():
        raise KeyError("k")

    with pytest.raises(KeyError):
        ray.get(f.remote())
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(f.remote())


def test_custom_exception_keeps_its_attributes(ray_start_regular_shared):
    @ray.remote
    def f():
        raise CustomError(42, "bad thing")

    with pytest.raises(CustomError) as info:
        ray.get(f.remote())
    assert info.value.code == 42
    assert info.value.detail == "bad thing"
    assert isinstance(info.value.cause, CustomError)
    assert info.value.cause.code == 42


def test_nested_task_error_reaches_the_driver(ray_start_regular_shared):
    @ray.remote
    def inner():
        raise ValueError("from inner")

    @ray.remote
    def outer():
        return ray.get(inner.remote())

    with pytest.raises(ValueError) as info:
        ray.get(outer.remote())
    assert "from inner" in str(info.value)


def test_error_passed_as_argument_fails_the_dependent_task(ray_start_regular_shared):
    @ray.remote
    def bad():
        raise IndexError("first")

    @ray.remote
    def use(x):
        return x

    with pytest.raises(IndexError):
        ray.get(use.remote(bad.remote()))


def test_returning_an_exception_is_a_value(ray_start_regular_shared):
    @ray.remote
    def f():
        return ValueError("returned, not raised")

    value = ray.get(f.remote())
    assert isinstance(value, ValueError)
    assert str(value) == "returned, not raised"


def test_actor_method_error(ray_start_regular_shared):
    @ray.remote
    class A:
        def bad(self):
            raise RuntimeError("in a method")

        def good(self):
            return 1

    a = A.remote()
    with pytest.raises(RuntimeError) as info:
        ray.get(a.bad.remote())
    assert "in a method" in str(info.value)
    assert ray.get(a.good.remote()) == 1  # the actor lives on


def test_async_actor_method_error(ray_start_regular_shared):
    @ray.remote
    class A:
        async def bad(self):
            raise ZeroDivisionError("async")

    a = A.remote()
    with pytest.raises(ZeroDivisionError):
        ray.get(a.bad.remote())
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(a.bad.remote())


def test_threaded_actor_method_error(ray_start_regular_shared):
    @ray.remote(max_concurrency=4)
    class A:
        def bad(self, i):
            raise ValueError(f"call {i}")

    a = A.remote()
    for i in range(4):
        with pytest.raises(ValueError) as info:
            ray.get(a.bad.remote(i))
        assert f"call {i}" in str(info.value)


def test_actor_constructor_error_kills_the_actor(ray_start_regular_shared):
    @ray.remote
    class Broken:
        def __init__(self):
            raise ValueError("constructor failed")

        def f(self):
            return 1

    a = Broken.remote()
    with pytest.raises(ray.exceptions.RayActorError) as info:
        ray.get(a.f.remote(), timeout=30)
    assert "constructor failed" in str(info.value)


def test_unicode_error_message(ray_start_regular_shared):
    @ray.remote
    def f():
        raise ValueError("ünïcödé ✓ 漢字")

    with pytest.raises(ValueError) as info:
        ray.get(f.remote())
    assert "ünïcödé ✓ 漢字" in str(info.value)


def test_long_error_message(ray_start_regular_shared):
    message = "x" * 100_000

    @ray.remote
    def f():
        raise ValueError(message)

    with pytest.raises(ValueError) as info:
        ray.get(f.remote())
    assert message in str(info.value)


def test_error_in_one_of_many_returns(ray_start_regular_shared):
    @ray.remote(num_returns=3)
    def f():
        raise ValueError("all three fail")

    refs = f.remote()
    for r in refs:
        with pytest.raises(ValueError):
            ray.get(r)


def test_get_of_list_raises_the_first_error(ray_start_regular_shared):
    @ray.remote
    def ok():
        return 1

    @ray.remote
    def bad():
        raise ValueError("bad")

    with pytest.raises(ValueError):
        ray.get([ok.remote(), bad.remote(), ok.remote()])


def test_wait_returns_failed_refs_as_ready(ray_start_regular_shared):
    @ray.remote
    def bad():
        raise ValueError("bad")

    ref = bad.remote()
    ready, not_ready = ray.wait([ref], timeout=30)
    assert ready == [ref] and not_ready == []


def test_get_timeout_error(ray_start_regular_shared):
    @ray.remote
    def slow():
        import time
        time.sleep(30)

    ref = slow.remote()
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(ref, timeout=0.1)
    with pytest.raises(TimeoutError):
        ray.get(ref, timeout=0.1)
    ray.cancel(ref, force=True)


def test_exception_raised_while_handling_another(ray_start_regular_shared):
    @ray.remote
    def f():
        try:
            raise KeyError("first")
        except KeyError:
            raise ValueError("second")

    with pytest.raises(ValueError) as info:
        ray.get(f.remote())
    assert "second" in str(info.value)


def test_exception_subclass_of_builtin_keeps_class(ray_start_regular_shared):
    class MyLookupError(LookupError):
        pass

    @ray.remote
    def f():
        raise MyLookupError("mine")

    with pytest.raises(LookupError):
        ray.get(f.remote())
    with pytest.raises(MyLookupError):
        ray.get(f.remote())


if __name__ == "__main__":
    sys.exit(pytest.main(["-sv", __file__]))
