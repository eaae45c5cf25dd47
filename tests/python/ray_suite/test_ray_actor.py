"""Actors as Ray's `python/ray/tests/test_actor.py`, `test_actor_advanced.py` and
`test_actor_failures.py` check them (ray-project/ray); each test is named after the Ray test it follows."""
import os
import sys

import numpy as np
import pytest

import ray
from suite_utils import wait_for_condition


def test_caching_actors(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def get_val(self):
            return 3

    f = Foo.remote()
    assert ray.get(f.get_val.remote()) == 3


def test_remote_function_within_actor(ray_start_regular_shared):
    val1 = 1
    val2 = 2

    @ray.remote
    def f(x):
        return val1 + x

    @ray.remote
    class Actor:
        def __init__(self, x):
            self.x = x
            self.y = val2
            self.object_refs = [f.remote(i) for i in range(5)]
            self.values2 = ray.get([f.remote(i) for i in range(5)])

        def get_values(self):
            return self.x, self.y, self.object_refs, self.values2

        def f(self):
            return [f.remote(i) for i in range(5)]

        def g(self):
            return ray.get([g.remote(i) for i in range(5)])

        def h(self, object_refs):
            return ray.get(object_refs)

    @ray.remote
    def g(x):
        return val2 + x

    actor = Actor.remote(1)
    values = ray.get(actor.get_values.remote())
    assert values[0] == 1
    assert values[1] == val2
    assert ray.get(values[2]) == list(range(1, 6))
    assert values[3] == list(range(1, 6))
    assert ray.get(ray.get(actor.f.remote())) == list(range(1, 6))
    assert ray.get(actor.g.remote()) == list(range(2, 7))
    assert ray.get(actor.h.remote([f.remote(i) for i in range(5)])) == list(range(1, 6))


def test_define_actor_within_actor(ray_start_regular_shared):
    @ray.remote
    class Actor1:
        def __init__(self, x):
            self.x = x

        def new_actor(self, z):
            @ray.remote
            class Actor2:
                def __init__(self, x):
                    self.x = x

                def get_value(self):
                    return self.x

            self.actor2 = Actor2.remote(z)

        def get_values(self, z):
            self.new_actor(z)
            return self.x, ray.get(self.actor2.get_value.remote())

    actor1 = Actor1.remote(3)
    assert ray.get(actor1.get_values.remote(5)) == (3, 5)


def test_use_actor_within_actor(ray_start_regular_shared):
    @ray.remote
    class Actor1:
        def __init__(self, x):
            self.x = x

        def get_val(self):
            return self.x

    @ray.remote
    class Actor2:
        def __init__(self, x, y):
            self.x = x
            self.actor1 = Actor1.remote(y)

        def get_values(self, z):
            return self.x, ray.get(self.actor1.get_val.remote())

    actor2 = Actor2.remote(3, 4)
    assert ray.get(actor2.get_values.remote(5)) == (3, 4)


def test_use_actor_twice(ray_start_regular_shared):
    @ray.remote
    class Actor1:
        def __init__(self):
            self.count = 0

        def inc(self):
            self.count += 1
            return self.count

    @ray.remote
    class Actor2:
        def __init__(self):
            pass

        def inc(self, handle):
            return ray.get(handle.inc.remote())

    a = Actor1.remote()
    a2 = Actor2.remote()
    assert ray.get(a2.inc.remote(a)) == 1
    assert ray.get(a2.inc.remote(a)) == 2


def test_define_actor_within_remote_function(ray_start_regular_shared):
    @ray.remote
    def f(x, n):
        @ray.remote
        class Actor1:
            def __init__(self, x):
                self.x = x

            def get_value(self):
                return self.x

        actor = Actor1.remote(x)
        return ray.get([actor.get_value.remote() for _ in range(n)])

    assert ray.get(f.remote(3, 1)) == [3]
    assert ray.get([f.remote(i, 20) for i in range(10)]) == [20 * [i] for i in range(10)]


def test_use_actor_within_remote_function(ray_start_regular_shared):
    @ray.remote
    class Actor1:
        def __init__(self, x):
            self.x = x

        def get_values(self):
            return self.x

    @ray.remote
    def f(x):
        actor = Actor1.remote(x)
        return ray.get(actor.get_values.remote())

    assert ray.get(f.remote(3)) == 3


def test_actor_import_counter(ray_start_regular_shared):
    @ray.remote
    def g():
        @ray.remote
        class Actor:
            def __init__(self):
                import numpy
                self.n = numpy.arange(3).sum()

            def get_val(self):
                return int(self.n)

        a = Actor.remote()
        return ray.get(a.get_val.remote())

    assert ray.get(g.remote()) == 3


def test_actor_class_name(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def __init__(self):
            pass

    assert "Foo" in repr(Foo)
    assert "Foo" in repr(Foo.remote())


def test_actor_exception(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def raise_error(self):
            raise ValueError("boom in the method")

        def ok(self):
            return 1

    foo = Foo.remote()
    with pytest.raises(ValueError, match="boom in the method"):
        ray.get(foo.raise_error.remote())
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(foo.raise_error.remote())
    assert ray.get(foo.ok.remote()) == 1  # the actor lives on


def test_actor_constructor_exception(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def __init__(self):
            raise ValueError("bad constructor")

        def ok(self):
            return 1

    foo = Foo.remote()
    with pytest.raises(ray.exceptions.RayActorError, match="bad constructor"):
        ray.get(foo.ok.remote(), timeout=30)


def test_actor_inheritance(ray_start_regular_shared):
    class NonActorBase:
        def __init__(self):
            pass

    @ray.remote
    class ActorBase(NonActorBase):
        def __init__(self):
            pass

        def base(self):
            return "base"

    with pytest.raises(Exception, match="cannot be subclassed|ActorClass|inherit"):
        class Derived(ActorBase):
            def __init__(self):
                pass

    class Plain(NonActorBase):
        def child(self):
            return "child"

    actor = ray.remote(Plain).remote()
    assert ray.get(actor.child.remote()) == "child"


def test_multiple_return_values(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def method0(self):
            return 1

        @ray.method(num_returns=1)
        def method1(self):
            return 1

        @ray.method(num_returns=2)
        def method2(self):
            return 1, 2

        @ray.method(num_returns=3)
        def method3(self):
            return 1, 2, 3

    f = Foo.remote()
    assert ray.get(f.method0.remote()) == 1
    assert ray.get(f.method1.remote()) == 1
    id1, id2 = f.method2.remote()
    assert ray.get([id1, id2]) == [1, 2]
    id1, id2, id3 = f.method3.remote()
    assert ray.get([id1, id2, id3]) == [1, 2, 3]


def test_options_num_returns(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def method(self):
            return 1, 2

    f = Foo.remote()
    assert ray.get(f.method.remote()) == (1, 2)
    x, y = f.method.options(num_returns=2).remote()
    assert ray.get([x, y]) == [1, 2]


def test_options_name(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def method(self, name):
            assert ray.get_runtime_context().get_task_name() == name
            return name

    f = Foo.remote()
    assert ray.get(f.method.options(name="foo").remote("foo")) == "foo"
    assert ray.get(f.method.options(name="bar").remote("bar")) == "bar"


def test_define_actor(ray_start_regular_shared):
    @ray.remote
    class Test:
        def __init__(self, x):
            self.x = x

        def f(self, y):
            return self.x + y

    t = Test.remote(2)
    assert ray.get(t.f.remote(1)) == 3
    with pytest.raises(Exception):
        t.f(1)  # a method must be called with .remote()


def test_actor_method_metadata_cache(ray_start_regular_shared):
    @ray.remote
    class Actor:
        pass

    a1 = Actor.remote()
    a2 = Actor.remote()
    assert a1 != a2
    assert a1 == a1


def test_multiple_actors(ray_start_regular_shared):
    @ray.remote
    class Counter:
        def __init__(self, value):
            self.value = value

        def increase(self):
            self.value += 1
            return self.value

        def reset(self):
            self.value = 0

    num_actors = 5
    num_increases = 50
    actors = [Counter.remote(i) for i in range(num_actors)]
    results = []
    for i in range(num_actors):
        results += [actors[i].increase.remote() for _ in range(num_increases)]
    result_values = ray.get(results)
    for i in range(num_actors):
        v = result_values[(num_increases * i):(num_increases * (i + 1))]
        assert v == list(range(i + 1, num_increases + i + 1))
    [a.reset.remote() for a in actors]
    results = []
    for j in range(num_increases):
        results += [actor.increase.remote() for actor in actors]
    result_values = ray.get(results)
    for j in range(num_increases):
        assert result_values[(num_actors * j):(num_actors * (j + 1))] == num_actors * [j + 1]


def test_inherit_actor_from_class(ray_start_regular_shared):
    class Foo:
        def __init__(self, x):
            self.x = x

        def f(self):
            return self.x

        def g(self, y):
            return self.x + y

    @ray.remote
    class Actor(Foo):
        def __init__(self, x):
            Foo.__init__(self, x)

        def get_value(self):
            return self.f()

    actor = Actor.remote(1)
    assert ray.get(actor.get_value.remote()) == 1
    assert ray.get(actor.g.remote(5)) == 6


def test_get_non_existing_named_actor(ray_start_regular_shared):
    with pytest.raises(ValueError):
        ray.get_actor("non_existing_actor")


def test_named_actor(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def method(self):
            return 1

    f = Foo.options(name="named-actor-test").remote()
    assert ray.get(f.method.remote()) == 1
    g = ray.get_actor("named-actor-test")
    assert ray.get(g.method.remote()) == 1
    with pytest.raises(ValueError):
        Foo.options(name="named-actor-test").remote()
    ray.kill(f)


def test_named_actor_get_if_exists(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def __init__(self, x):
            self.x = x

        def get(self):
            return self.x

    a = Foo.options(name="get-if-exists", get_if_exists=True).remote(1)
    b = Foo.options(name="get-if-exists", get_if_exists=True).remote(2)
    assert ray.get(a.get.remote()) == 1
    assert ray.get(b.get.remote()) == 1  # the first one
    ray.kill(a)


def test_actor_name_empty_is_an_error(ray_start_regular_shared):
    @ray.remote
    class Foo:
        pass

    with pytest.raises(ValueError):
        Foo.options(name="").remote()


def test_actor_class_methods(ray_start_regular_shared):
    class Foo:
        x = 2

        @classmethod
        def as_remote(cls):
            return ray.remote(cls)

        @classmethod
        def f(cls):
            return cls.x

        @staticmethod
        def g(y):
            return y * 2

        def echo(self, arg):
            return arg

    a = Foo.as_remote().remote()
    assert ray.get(a.echo.remote(2)) == 2
    assert ray.get(a.f.remote()) == 2
    assert ray.get(a.g.remote(2)) == 4


def test_keyword_args(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def __init__(self, arg0, arg1=1, arg2="a"):
            self.arg0 = arg0
            self.arg1 = arg1
            self.arg2 = arg2

        def get_values(self, arg0, arg1=2, arg2="b"):
            return self.arg0 + arg0, self.arg1 + arg1, self.arg2 + arg2

    actor = Actor.remote(0)
    assert ray.get(actor.get_values.remote(1)) == (1, 3, "ab")
    actor = Actor.remote(1, 2)
    assert ray.get(actor.get_values.remote(2, 3)) == (3, 5, "ab")
    actor = Actor.remote(1, 2, "c")
    assert ray.get(actor.get_values.remote(2, 3, "d")) == (3, 5, "cd")
    actor = Actor.remote(1, arg2="c")
    assert ray.get(actor.get_values.remote(0, arg2="d")) == (1, 3, "cd")
    assert ray.get(actor.get_values.remote(0, arg2="d", arg1=0)) == (1, 1, "cd")
    with pytest.raises(TypeError):
        Actor.remote()
    with pytest.raises(TypeError):
        Actor.remote(0, 1, 2, arg3=3)
    with pytest.raises(TypeError):
        actor.get_values.remote()


def test_variable_number_of_args(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def __init__(self, arg0, arg1=1, *args):
            self.arg0 = arg0
            self.arg1 = arg1
            self.args = args

        def get_values(self, arg0, arg1=2, *args):
            return self.arg0 + arg0, self.arg1 + arg1, self.args, args

    actor = Actor.remote(0)
    assert ray.get(actor.get_values.remote(1)) == (1, 3, (), ())
    actor = Actor.remote(1, 2, "c")
    assert ray.get(actor.get_values.remote(2, 3, "d")) == (3, 5, ("c",), ("d",))

    @ray.remote
    class Actor2:
        def __init__(self, *args):
            self.args = args

        def get_values(self, *args):
            return self.args, args

    a = Actor2.remote()
    assert ray.get(a.get_values.remote()) == ((), ())
    a = Actor2.remote(1)
    assert ray.get(a.get_values.remote(2, 3)) == ((1,), (2, 3))


def test_no_args(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def __init__(self):
            pass

        def get_values(self):
            return 1

    actor = Actor.remote()
    assert ray.get(actor.get_values.remote()) == 1


def test_no_constructor(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def get_values(self):
            return 1

    actor = Actor.remote()
    assert ray.get(actor.get_values.remote()) == 1


def test_custom_classes(ray_start_regular_shared):
    class Foo:
        def __init__(self, x):
            self.x = x

    @ray.remote
    class Actor:
        def __init__(self, f2):
            self.f1 = Foo(1)
            self.f2 = f2

        def get_values1(self):
            return self.f1, self.f2

        def get_values2(self, f3):
            return self.f1, self.f2, f3

    actor = Actor.remote(Foo(2))
    results1 = ray.get(actor.get_values1.remote())
    assert results1[0].x == 1
    assert results1[1].x == 2
    results2 = ray.get(actor.get_values2.remote(Foo(3)))
    assert (results2[0].x, results2[1].x, results2[2].x) == (1, 2, 3)


def test_actor_class_attributes(ray_start_regular_shared):
    class Grandparent:
        GRANDPARENT = 2

    class Parent1(Grandparent):
        PARENT1 = 6

    class Parent2:
        PARENT2 = 7

    @ray.remote
    class TestActor(Parent1, Parent2):
        X = 3

        @classmethod
        def f(cls):
            assert TestActor.GRANDPARENT == 2
            assert TestActor.PARENT1 == 6
            assert TestActor.PARENT2 == 7
            assert TestActor.X == 3
            return 4

        def g(self):
            assert TestActor.GRANDPARENT == 2
            assert TestActor.PARENT1 == 6
            assert TestActor.PARENT2 == 7
            assert TestActor.f() == 4
            return TestActor.X

    t = TestActor.remote()
    assert ray.get(t.g.remote()) == 3


def test_actor_static_attributes(ray_start_regular_shared):
    class Grandparent:
        GRANDPARENT = 2

        @staticmethod
        def grandparent_static():
            assert Grandparent.GRANDPARENT == 2
            return 1

    class Parent1(Grandparent):
        PARENT1 = 6

        @staticmethod
        def parent1_static():
            assert Parent1.PARENT1 == 6
            return 2

        def parent1(self):
            assert Parent1.PARENT1 == 6

    class Parent2:
        PARENT2 = 7

        def parent2(self):
            assert Parent2.PARENT2 == 7

    @ray.remote
    class TestActor(Parent1, Parent2):
        X = 3

        @staticmethod
        def f():
            assert TestActor.GRANDPARENT == 2
            assert TestActor.PARENT1 == 6
            assert TestActor.PARENT2 == 7
            assert TestActor.X == 3
            return 4

        def g(self):
            assert TestActor.GRANDPARENT == 2
            assert TestActor.PARENT1 == 6
            assert TestActor.PARENT2 == 7
            assert TestActor.f() == 4
            return TestActor.X

    t = TestActor.remote()
    assert ray.get(t.g.remote()) == 3


def test_decorator_args(ray_start_regular_shared):
    for bad in ((1,), ("a",)):
        with pytest.raises((TypeError, AssertionError)):  # Ray: AssertionError; phalanx: TypeError
            @ray.remote(*bad)
            class Actor:
                pass

    @ray.remote(num_cpus=0)
    class Actor2:
        def __init__(self):
            pass

    @ray.remote(num_cpus=0, resources={})
    class Actor3:
        def __init__(self):
            pass

    Actor2.remote()
    Actor3.remote()


def test_random_id_generation(ray_start_regular_shared):
    @ray.remote
    class Foo:
        def __init__(self):
            pass

    np.random.seed(1234)
    import random
    random.seed(1234)
    f1 = Foo.remote()
    np.random.seed(1234)
    random.seed(1234)
    f2 = Foo.remote()
    assert f1._actor_id != f2._actor_id


def test_actor_handle_is_pickleable_and_usable_in_tasks(ray_start_regular_shared):
    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    @ray.remote
    def use(handle):
        return ray.get(handle.inc.remote())

    c = Counter.remote()
    assert sorted(ray.get([use.remote(c) for _ in range(5)])) == [1, 2, 3, 4, 5]
    assert ray.get(c.inc.remote()) == 6


def test_return_actor_handle_from_actor(ray_start_regular_shared):
    @ray.remote
    class Inner:
        def ping(self):
            return "pong"

    @ray.remote
    class Outer:
        def __init__(self):
            self.inner = Inner.remote()

        def get_inner(self):
            return self.inner

    outer = Outer.remote()
    inner = ray.get(outer.get_inner.remote())
    assert ray.get(inner.ping.remote()) == "pong"


def test_actor_self_handle(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def self_handle(self):
            return ray.get_runtime_context().current_actor

        def ping(self):
            return 1

    a = Actor.remote()
    handle = ray.get(a.self_handle.remote())
    assert ray.get(handle.ping.remote()) == 1


def test_actor_large_objects(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def __init__(self):
            pass

        def get_large_object(self):
            return np.zeros(8 * 1024 * 1024)

        def sum(self, array):
            return float(array.sum())

    a = Actor.remote()
    assert ray.get(a.get_large_object.remote()).shape == (8 * 1024 * 1024,)
    assert ray.get(a.sum.remote(np.ones(4 * 1024 * 1024))) == 4 * 1024 * 1024


def test_actor_method_call_order_many(ray_start_regular_shared):
    @ray.remote
    class Appender:
        def __init__(self):
            self.items = []

        def add(self, x):
            self.items.append(x)

        def items_(self):
            return self.items

    a = Appender.remote()
    for i in range(200):
        a.add.remote(i)
    assert ray.get(a.items_.remote()) == list(range(200))


def test_actor_getattr_unknown_method(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def known(self):
            return 1

    a = Actor.remote()
    with pytest.raises(AttributeError):
        a.unknown.remote()


def test_actor_private_and_dunder_methods(ray_start_regular_shared):
    @ray.remote
    class Actor:
        def _private(self):
            return "private"

        def __str__(self):
            return "actor-str"

    a = Actor.remote()
    assert ray.get(a._private.remote()) == "private"
