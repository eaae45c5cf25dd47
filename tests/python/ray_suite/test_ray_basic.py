"""Tasks, objects and options as Ray's `python/ray/tests/test_basic.py`, `test_basic_2.py` and
`test_basic_3.py` check them (ray-project/ray); each test is named after Ray's test it follows."""
import collections
import dataclasses
import string
import sys

import numpy as np
import pytest

import ray


def test_simple_serialization(ray_start_regular_shared):
    values = [0, 0.0, 0.9, 1 << 62, 1 << 999, "a", string.printable, "\u262F", "\xff\xfe\x9c\x001\x000\x00",
              None, True, False, [], (), {}, type, int, set(), frozenset([1, 2]), b"bytes",
              collections.Counter("abracadabra"), collections.OrderedDict([("hello", 1), ("world", 2)]),
              collections.deque([1, 2, 3, "a"]), complex(1, 2)]

    @ray.remote
    def identity(x):
        return x

    for value in values + [[v] for v in values] + [(v,) for v in values] + [{(): v} for v in values]:
        assert ray.get(identity.remote(value)) == value
        assert ray.get(ray.put(value)) == value
        assert type(ray.get(identity.remote(value))) is type(value)


def test_complex_serialization(ray_start_regular_shared):
    Point = collections.namedtuple("Point", ["x", "y"])

    @dataclasses.dataclass
    class Data:
        number: int
        items: list

    class WithReduce:
        def __init__(self, v):
            self.v = v

        def __reduce__(self):
            return (WithReduce, (self.v + 1,))

    @ray.remote
    def identity(x):
        return x

    nested = [[[[[[[[[[[[]]]]]]]]]]]]
    assert ray.get(identity.remote(nested)) == nested
    assert ray.get(identity.remote(Point(11, y=22))) == Point(11, 22)
    assert ray.get(identity.remote(Data(3, [1, 2]))) == Data(3, [1, 2])
    assert ray.get(ray.put(WithReduce(1))).v == 2  # pickled once
    assert ray.get(identity.remote(WithReduce(1))).v == 3  # as argument, then as return value
    arrays = {f"obj{i}": np.random.normal(size=[100, 100]) for i in range(5)}
    back = ray.get(identity.remote(arrays))
    for key, value in arrays.items():
        np.testing.assert_array_equal(back[key], value)
    assert ray.get(identity.remote(np.array(["hi", 3], dtype=object))).tolist() == ["hi", 3]
    for scalar in (np.int8(3), np.uint64(5), np.float32(1.9), np.float64(1.9)):
        assert ray.get(identity.remote(scalar)) == scalar


def test_nested_functions(ray_start_regular_shared):
    @ray.remote
    def f():
        return g(), ray.get(h.remote())

    def g():
        return 1

    @ray.remote
    def h():
        return 2

    assert ray.get(f.remote()) == (1, 2)


def test_recursive_remote_call(ray_start_regular_shared):
    @ray.remote
    def factorial(n):
        return 1 if n == 0 else n * ray.get(factorial.remote(n - 1))

    assert ray.get(factorial.remote(5)) == 120


def test_ray_recursive_objects(ray_start_regular_shared):
    class ClassA:
        pass

    lst = []
    lst.append(lst)
    a1 = ClassA()
    a1.field = a1
    d1 = {}
    d1["key"] = d1
    # Ray's test expects an error; pickle handles cycles, so both Ray and phalanx now keep them.
    for obj in (lst, a1, d1):
        ray.get(ray.put(obj))
    assert ray.get(ray.put(lst))[0][0] is not None


def test_passing_arguments_by_value_out_of_the_box(ray_start_regular_shared):
    @ray.remote
    def f(x):
        return x

    def temp():
        return 1

    assert ray.get(f.remote(temp))() == 1
    assert ray.get(f.remote(lambda x: x + 1))(3) == 4
    assert ray.get(f.remote({1, (1, 2, "hi")})) == {1, (1, 2, "hi")}
    assert ray.get(f.remote(int)) is int
    assert ray.get(f.remote(str)) is str

    class Foo:
        pass

    assert ray.get(ray.put(Foo)).__name__ == "Foo"


def test_putting_object_that_closes_over_object_ref(ray_start_regular_shared):
    class Foo:
        def __init__(self):
            self.val = ray.put(0)

        def method(self):
            f  # noqa: B018

    f = Foo()
    assert ray.get(ray.get(ray.put(f)).val) == 0


def test_put_get(shutdown_only, init_kwargs):
    ray.init(num_cpus=0, **init_kwargs)
    for i in range(100):
        for value in (i * 10 ** 6, i * 10 ** 6 * 1.0, "h" * i, [1] * i):
            assert ray.get(ray.put(value)) == value


def test_register_class(ray_start_regular_shared):
    class TempClass:
        pass

    ray.get(ray.put(TempClass()))

    @ray.remote
    def f(x):
        return x

    class Foo:
        def __init__(self, value=0):
            self.value = value

        def __eq__(self, other):
            return other.value == self.value

        def __hash__(self):
            return hash(self.value)

    assert ray.get(f.remote(Foo(7))) == Foo(7)

    class NewTempClass:
        def __init__(self, value):
            self.value = value

    @ray.remote
    def h1(x):
        return NewTempClass(x)

    @ray.remote
    def h2(x):
        return ray.get(h1.remote(x))

    assert ray.get(h2.remote(10)).value == 10


def test_keyword_args(ray_start_regular_shared):
    @ray.remote
    def keyword_fct1(a, b="hello"):
        return f"{a} {b}"

    @ray.remote
    def keyword_fct2(a="hello", b="world"):
        return f"{a} {b}"

    @ray.remote
    def keyword_fct3(a, b, c="hello", d="world"):
        return f"{a} {b} {c} {d}"

    assert ray.get(keyword_fct1.remote(1)) == "1 hello"
    assert ray.get(keyword_fct1.remote(1, "hi")) == "1 hi"
    assert ray.get(keyword_fct1.remote(1, b="world")) == "1 world"
    assert ray.get(keyword_fct1.remote(a=1, b="world")) == "1 world"
    assert ray.get(keyword_fct2.remote(a="w", b="hello")) == "w hello"
    assert ray.get(keyword_fct2.remote(b="w", a="hello")) == "hello w"
    assert ray.get(keyword_fct2.remote("w")) == "w world"
    assert ray.get(keyword_fct3.remote(0, 1, c="w", d="hello")) == "0 1 w hello"
    assert ray.get(keyword_fct3.remote(0, 1, d="w", c="hello")) == "0 1 hello w"
    assert ray.get(keyword_fct3.remote(0, 1, c="w")) == "0 1 w world"

    with pytest.raises(TypeError):
        keyword_fct1.remote()
    with pytest.raises(TypeError):
        keyword_fct1.remote(a=1, b=2, c=3)
    with pytest.raises(TypeError):
        keyword_fct1.remote(1, 2, 3)


def test_variable_number_of_args(ray_start_regular_shared):
    @ray.remote
    def varargs_fct1(*a):
        return " ".join(map(str, a))

    @ray.remote
    def varargs_fct2(a, *b):
        return " ".join(map(str, b))

    assert ray.get(varargs_fct1.remote(0, 1, 2)) == "0 1 2"
    assert ray.get(varargs_fct2.remote(0, 1, 2)) == "1 2"
    with pytest.raises(TypeError):
        varargs_fct2.remote()

    @ray.remote
    def f1(*args):
        return args

    @ray.remote
    def f2(*args, **kwargs):
        return args, kwargs

    assert ray.get(f1.remote()) == ()
    assert ray.get(f1.remote(1)) == (1,)
    assert ray.get(f1.remote(1, 2, 3)) == (1, 2, 3)
    assert ray.get(f2.remote()) == ((), {})
    assert ray.get(f2.remote(1, b=2)) == ((1,), {"b": 2})


def test_defining_remote_functions(ray_start_regular_shared):
    data = [1, 2, 3]

    @ray.remote
    def g():
        return data

    assert ray.get(g.remote()) == [1, 2, 3]

    @ray.remote
    def h():
        return np.zeros([3, 5])

    np.testing.assert_equal(ray.get(h.remote()), np.zeros([3, 5]))

    @ray.remote
    def j():
        return sys.version_info[0]

    assert ray.get(j.remote()) == sys.version_info[0]

    @ray.remote
    def k(x):
        return x + 1

    @ray.remote
    def k2(x):
        return ray.get(k.remote(x))

    assert ray.get(k2.remote(1)) == 2


def test_redefining_remote_functions(ray_start_regular_shared):
    @ray.remote
    def f(x):
        return x + 1

    assert ray.get(f.remote(0)) == 1

    @ray.remote
    def f(x):  # noqa: F811 - the point of the test
        return x + 10

    while ray.get(f.remote(0)) != 10:
        pass

    @ray.remote
    def g():
        return nonexistent()  # noqa: F821

    with pytest.raises(ray.exceptions.RayTaskError, match="nonexistent"):
        ray.get(g.remote())

    def nonexistent():
        return 1

    @ray.remote
    def g():  # noqa: F811
        return nonexistent()

    assert ray.get(g.remote()) == 1


def test_call_matrix(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def small_value(self):
            return 0

        def large_value(self):
            return np.zeros(10 * 1024 * 1024)

        def echo(self, x):
            return x[0] if isinstance(x, list) else x

    @ray.remote
    def small_value():
        return 0

    @ray.remote
    def large_value():
        return np.zeros(10 * 1024 * 1024)

    @ray.remote
    def echo(x):
        return x[0] if isinstance(x, list) else x

    actor = Actor.remote()
    for source in ("actor", "task", "driver"):
        for dest in ("actor", "task"):
            for is_large in (False, True):
                for out_of_band in (False, True):
                    if source == "actor":
                        ref = actor.large_value.remote() if is_large else actor.small_value.remote()
                    elif source == "task":
                        ref = large_value.remote() if is_large else small_value.remote()
                    else:
                        ref = ray.put(np.zeros(10 * 1024 * 1024) if is_large else 0)
                    arg = [ref] if out_of_band else ref
                    result = ray.get(actor.echo.remote(arg) if dest == "actor" else echo.remote(arg))
                    if out_of_band:
                        result = ray.get(result)
                    if is_large:
                        assert result.shape == (10 * 1024 * 1024,)
                    else:
                        assert result == 0


def test_actor_call_order(ray_start_regular_shared):
    @ray.remote
    def small_value():
        return 0

    @ray.remote
    class Actor:
        def __init__(self):
            self.count = 0

        def inc(self, count, dependency):
            assert count == self.count
            self.count += 1
            return count

    a = Actor.remote()
    assert ray.get([a.inc.remote(i, small_value.remote()) for i in range(100)]) == list(range(100))


def test_actor_pass_by_ref_order_optimization(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def f(self, x):
            return x

    a = Actor.remote()

    @ray.remote
    def fast_value():
        return 1

    # Calls with ready arguments, one after another from one caller, come back in order.
    refs = [a.f.remote(fast_value.remote()) for _ in range(20)]
    assert ray.get(refs) == [1] * 20


def test_get_multiple(ray_start_regular_shared):
    object_refs = [ray.put(i) for i in range(10)]
    assert ray.get(object_refs) == list(range(10))
    indices = list(np.random.choice(range(10), 5))
    indices += indices
    assert ray.get([object_refs[i] for i in indices]) == indices


def test_get_with_timeout(ray_start_regular_shared):
    signal = SignalActor.remote()
    assert ray.get(signal.ready.remote(), timeout=10) is True

    @ray.remote
    def wait_on(s):
        ray.get(s.wait.remote())
        return 1

    ref = wait_on.remote(signal)
    with pytest.raises(ray.exceptions.GetTimeoutError):
        ray.get(ref, timeout=0.1)
    # TimeoutError is a parent of GetTimeoutError, so both catch it.
    with pytest.raises(TimeoutError):
        ray.get(ref, timeout=0)
    ray.get(signal.send.remote())
    assert ray.get(ref, timeout=30) == 1


def test_get_with_timeout_zero_on_ready_object(ray_start_regular_shared):
    ref = ray.put(1)
    assert ray.get(ref, timeout=0) == 1


def test_get_dict(ray_start_regular_shared):
    d = {str(i): ray.put(i) for i in range(5)}
    for i in range(5, 10):
        d[str(i)] = i
    # Ray's ray.get takes a ref or a list of refs; a dict is a ValueError.
    with pytest.raises(ValueError):
        ray.get(d)


def test_many_fractional_resources(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, resources={"Custom": 2}, **init_kwargs)

    @ray.remote
    def f(block, accepted_resources):
        true_resources = {resource: value[0][1] for resource, value in
                          ray.get_runtime_context().get_assigned_resources().items()
                          for value in [[(None, value)]]}
        if block:
            ray.get(g.remote())
        return all(abs(true_resources.get(k, 0) - v) < 1e-9 for k, v in accepted_resources.items())

    @ray.remote
    def g():
        return None

    results = []
    for rand1, rand2 in [(0.25, 0.5), (0.1, 0.3), (0.5, 0.5), (0.01, 0.99)]:
        resource_set = {"CPU": rand1, "Custom": rand2}
        results.append(f._remote([False, resource_set], num_cpus=rand1, resources={"Custom": rand2})
                       if hasattr(f, "_remote") else
                       f.options(num_cpus=rand1, resources={"Custom": rand2}).remote(False, resource_set))
    assert all(ray.get(results))


def test_multi_resource_constraints(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, resources={"Custom": 3}, **init_kwargs)

    @ray.remote(num_cpus=1, resources={"Custom": 3})
    def f():
        return ray.get_runtime_context().get_assigned_resources()

    assigned = ray.get(f.remote())
    assert assigned["CPU"] == 1
    assert assigned["Custom"] == 3


def test_background_tasks_with_max_calls(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, **init_kwargs)

    @ray.remote(max_calls=1)
    def pid():
        import os
        return os.getpid()

    pids = ray.get([pid.remote() for _ in range(6)])
    assert len(set(pids)) == 6  # a fresh worker each time


def test_function_descriptor(ray_start_regular_shared):
    @ray.remote
    def named_task():
        return ray.get_runtime_context().get_task_name()

    assert "named_task" in ray.get(named_task.remote())
    assert ray.get(named_task.options(name="custom").remote()) == "custom"


def test_duplicate_args(ray_start_regular_shared):
    @ray.remote
    def f(arg1, arg2, arg1_duplicate, kwarg1=None, kwarg2=None, kwarg1_duplicate=None):
        assert arg1 == kwarg1
        assert arg1 != arg2
        assert arg1 == arg1_duplicate
        assert kwarg1 != kwarg2
        assert kwarg1 == kwarg1_duplicate
        return True

    arg1 = [1]
    arg2 = [2]
    ref1 = ray.put(arg1)
    ref2 = ray.put(arg2)
    assert ray.get(f.remote(ref1, ref2, ref1, kwarg1=ref1, kwarg2=ref2, kwarg1_duplicate=ref1))


def test_options_num_returns(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1, 2

    x, y = f.options(num_returns=2).remote()
    assert ray.get([x, y]) == [1, 2]

    @ray.remote(num_returns=3)
    def g():
        return 1, 2, 3

    assert ray.get(list(g.remote())) == [1, 2, 3]
    assert ray.get(g.options(num_returns=1).remote()) == (1, 2, 3)


def test_num_returns_zero(ray_start_regular_shared):
    @ray.remote(num_returns=0)
    def f():
        return None

    assert f.remote() is None


def test_invalid_arguments(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    for bad in (-2, "a", 1.5):
        with pytest.raises((ValueError, TypeError)):
            f.options(max_retries=bad).remote()
    with pytest.raises((ValueError, TypeError)):
        f.options(num_returns=-1).remote()
    with pytest.raises((ValueError, TypeError)):
        f.options(num_cpus=-1).remote()


def test_options_unknown_keyword(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises((ValueError, TypeError)):
        f.options(not_an_option=1)
    with pytest.raises((ValueError, TypeError)):
        ray.remote(not_an_option=1)(lambda: 1)


def test_remote_call_directly_is_an_error(ray_start_regular_shared):
    @ray.remote
    def f():
        return 1

    with pytest.raises(TypeError, match="remote"):
        f()

    @ray.remote
    class A:
        pass

    with pytest.raises(TypeError, match="remote"):
        A()


def test_fetch_local(ray_start_regular_shared):
    ref = ray.put(np.arange(1000))
    ready, not_ready = ray.wait([ref], fetch_local=False)
    assert ready == [ref] and not_ready == []
    ready, _ = ray.wait([ref], fetch_local=True)
    assert ready == [ref]


def test_put_and_get_large_array(ray_start_regular_shared):
    array = np.random.rand(64 * 1024 * 128)  # 64 MiB
    back = ray.get(ray.put(array))
    np.testing.assert_array_equal(back, array)
    # Zero-copy reads of numpy arrays are read-only, as Ray's.
    assert not back.flags.writeable


def test_get_returns_same_value_twice(ray_start_regular_shared):
    ref = ray.put({"a": [1, 2]})
    assert ray.get(ref) == ray.get(ref) == {"a": [1, 2]}


def test_object_ref_passed_nested_not_resolved(ray_start_regular_shared):
    @ray.remote
    def f(x):
        return isinstance(x[0], ray.ObjectRef)

    @ray.remote
    def g(x):
        return isinstance(x, ray.ObjectRef)

    ref = ray.put(1)
    assert ray.get(f.remote([ref])) is True
    assert ray.get(g.remote(ref)) is False


def test_task_returns_object_ref(ray_start_regular_shared):
    @ray.remote
    def inner():
        return 7

    @ray.remote
    def outer():
        return inner.remote()

    ref = ray.get(outer.remote())
    assert isinstance(ref, ray.ObjectRef)
    assert ray.get(ref) == 7


def test_large_args_and_returns(ray_start_regular_shared):
    @ray.remote
    def double(a):
        return a * 2

    x = np.ones(5 * 1024 * 1024, dtype=np.float64)
    assert ray.get(double.remote(x)).sum() == 2 * x.size


def test_many_tasks(ray_start_regular_shared):
    @ray.remote
    def f(i):
        return i

    assert ray.get([f.remote(i) for i in range(1000)]) == list(range(1000))


def test_remote_function_in_task_uses_closure(ray_start_regular_shared):
    constant = 41

    @ray.remote
    def f():
        return constant + 1

    assert ray.get(f.remote()) == 42


SignalActor = None


@pytest.fixture(autouse=True)
def _signal_actor():
    """Ray's SignalActor test helper, written here (ray._common.test_utils has the original)."""
    global SignalActor

    @ray.remote(num_cpus=0)
    class _SignalActor:
        def __init__(self):
            import asyncio
            self.ready_event = asyncio.Event()

        def send(self, clear=False):
            self.ready_event.set()
            if clear:
                self.ready_event.clear()

        async def wait(self, should_wait=True):
            if should_wait:
                await self.ready_event.wait()

        def ready(self):
            return True

    SignalActor = _SignalActor
    yield
