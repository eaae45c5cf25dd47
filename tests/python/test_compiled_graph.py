"""Compiled graphs (phalanx.dag), written from Ray's documented examples of
Compiled Graphs with `import phalanx as ray`: one actor, a chain, several
outputs, an exception raised inside, teardown, a killed actor; then what a
user gets wrong (a task bound, execute after teardown, more executions in
flight than the bound, a get that times out), graphs across raylets, and an
async actor."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import phalanx as ray
from phalanx.dag import InputNode, MultiOutputNode

from conftest import loopback_nodes, wait_until


@ray.remote
class EchoActor:
    def echo(self, msg):
        return msg

    def inc(self, x, by=1):
        return x + by

    def pid(self):
        return os.getpid()

    def fail_on(self, x, bad):
        if x == bad:
            raise RuntimeError(f"oops: {x}")
        return x

    def sleep(self, s):
        time.sleep(s)
        return s

    def unpicklable(self, x):
        return threading.Lock() if x else x

    def scale(self, arrays, by):
        """Each array times `by`, in place (the arrays that arrive are writable)."""
        for a in arrays.values():
            a *= by
        return arrays


@ray.remote
class AsyncActor:
    async def double(self, x):
        return 2 * x


@ray.remote
def plain_task(x):
    return x


def test_one_actor(cluster):
    # Ray's quickstart: one actor's method on the input.
    a = EchoActor.remote()
    with ray.dag.InputNode() as inp:
        dag = a.echo.bind(inp)
    dag = dag.experimental_compile()
    assert ray.get(dag.execute("hello")) == "hello"
    for i in range(100):
        assert ray.get(dag.execute(i)) == i
    x = np.arange(1 << 20, dtype=np.float32)  # 4 MiB each way
    assert np.array_equal(ray.get(dag.execute(x)), x)
    dag.teardown()


def test_chain_and_ordinary_calls_after_teardown(cluster):
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = b.inc.bind(a.inc.bind(inp), by=10)
    compiled = dag.experimental_compile()
    refs = [compiled.execute(i) for i in range(5)]  # several in flight, got out of order
    assert [r.get() for r in reversed(refs)] == [i + 11 for i in reversed(range(5))]
    compiled.teardown()
    compiled.teardown()  # (a second does nothing)
    # The actors are theirs again: ordinary calls run.
    assert ray.get([a.inc.remote(1), b.echo.remote("back")], timeout=30) == [2, "back"]
    with pytest.raises(ray.exceptions.RayChannelError, match="torn down"):
        compiled.execute(1)


def test_multiple_outputs_and_input_parts(cluster):
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = MultiOutputNode([a.inc.bind(inp[0]), b.echo.bind(inp.word), a.inc.bind(inp[1], by=inp[0])])
    compiled = dag.experimental_compile()
    refs = compiled.execute(1, 5, word="hi")
    assert isinstance(refs, list) and len(refs) == 3
    assert ray.get(refs) == [2, "hi", 6]
    # A part the graph reads but execute() was not given: the error names it, the graph goes on.
    with pytest.raises(KeyError, match="inp.word"):
        ray.get(compiled.execute(1, 2)[1])
    assert ray.get(compiled.execute(3, 4, word="again")) == [4, "again", 7]
    # Arguments that cannot be pickled: execute says so, nothing is sent, the graph goes on.
    with pytest.raises(ray.exceptions.SerializationError, match="execute\\(\\)'s arguments cannot be pickled"):
        compiled.execute(1, threading.Lock(), word="x")
    assert ray.get(compiled.execute(5, 6, word="on")) == [6, "on", 11]
    compiled.teardown()


def test_exception_inside_is_raised_by_get_and_the_graph_goes_on(cluster):
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = b.inc.bind(a.fail_on.bind(inp, 3))
    compiled = dag.experimental_compile()
    refs = [compiled.execute(i) for i in range(5)]
    assert ray.get(refs[2]) == 3
    with pytest.raises(RuntimeError, match="oops: 3") as e:  # the cause's class, as Ray's RayTaskError
        ray.get(refs[3])
    assert isinstance(e.value, ray.exceptions.RayTaskError)
    assert "fail_on" in str(e.value)
    assert ray.get(refs[4]) == 5
    with pytest.raises(ValueError, match="got already"):
        ray.get(refs[2])
    compiled.teardown()
    # A result that cannot be pickled is an error value too, naming the method.
    with InputNode() as inp:
        compiled = a.unpicklable.bind(inp).experimental_compile()
    with pytest.raises(ray.exceptions.SerializationError, match="unpicklable.*cannot be pickled"):
        ray.get(compiled.execute(1))
    assert ray.get(compiled.execute(0)) == 0
    compiled.teardown()


def test_a_killed_actor_ends_get_with_a_named_error_and_frees_the_graph(cluster):
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = b.echo.bind(a.echo.bind(inp))
    compiled = dag.experimental_compile()
    assert ray.get(compiled.execute(1)) == 1
    ray.kill(a)
    started = time.monotonic()
    with pytest.raises(ray.exceptions.RayActorError, match=r"EchoActor .*is gone"):
        ray.get(compiled.execute(2), timeout=30)
    assert time.monotonic() - started < 10
    with pytest.raises(ray.exceptions.RayChannelError, match="runs no more"):
        compiled.execute(3)
    # The surviving actor's loop ended: it serves ordinary calls again.
    assert ray.get(b.echo.remote("alive"), timeout=30) == "alive"
    # Compiling a graph with a dead actor fails at once, naming it.
    with InputNode() as inp:
        dag = b.echo.bind(a.echo.bind(inp))
    started = time.monotonic()
    with pytest.raises(ray.exceptions.RayActorError, match=r"compiling the graph: actor .*EchoActor"):
        dag.experimental_compile()
    assert time.monotonic() - started < 10
    assert ray.get(b.echo.remote("still"), timeout=30) == "still"


def test_arrays_travel_whole_and_writable(cluster):
    # numpy arrays and bytearrays go out of band (not copied into the
    # pickle); what arrives is whole, of its dtype and shape, writable, and
    # the driver's own arrays are left as they were.
    a, b = EchoActor.remote(), EchoActor.remote()
    with InputNode() as inp:
        dag = b.scale.bind(a.scale.bind(inp[0], 2), 3)
    compiled = dag.experimental_compile()
    try:
        big = np.arange((5 << 20) // 8, dtype=np.float64)  # 5 MiB: more than the shared-memory pipe holds
        odd = np.arange(7, dtype=np.int16)
        strided = np.arange(24, dtype=np.int32).reshape(4, 6)[:, 1]  # not contiguous: pickled in band
        empty = np.zeros((0, 3), np.complex128)
        for i in range(3):
            arrays = {"big": big, "odd": odd, "strided": strided, "empty": empty}
            got = ray.get(compiled.execute(arrays), timeout=60)
            for name, want in arrays.items():
                assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
                np.testing.assert_array_equal(got[name], want * 6)
                assert got[name].flags.writeable
            assert big[1] == 1.0 and odd[1] == 1  # (the driver's arrays)
        small = ray.get(compiled.execute({"small": np.ones(256, np.float32)}), timeout=60)["small"]  # (a short message)
        assert small.flags.writeable and small.sum() == 256 * 6
        payload = bytearray(b"x" * (3 << 20))
        with InputNode() as inp:
            echo = a.echo.bind(inp)
        compiled.teardown()
        compiled = echo.experimental_compile()
        back = ray.get(compiled.execute(payload), timeout=60)
        assert type(back) is bytearray and back == payload
    finally:
        compiled.teardown()


def test_bad_graphs_say_what_is_supported(cluster):
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = a.echo.bind(plain_task.bind(inp))
    assert ray.get(dag.execute(7), timeout=30) == 7  # a graph with a task runs without compiling
    with pytest.raises(TypeError, match="is a task: compiled graphs run actor methods"):
        dag.experimental_compile()
    with pytest.raises(TypeError, match="a compiled graph calls live actors; make the actor with .remote"):
        EchoActor.bind().echo.bind(InputNode()).experimental_compile()
    with InputNode() as inp:
        dag = MultiOutputNode([a.echo.bind(inp), a.echo.bind(1)])
    with pytest.raises(ValueError, match="does not depend on the graph's InputNode"):
        dag.experimental_compile()
    with pytest.raises(TypeError, match="unknown options: _bogus"):
        a.echo.bind(InputNode()).experimental_compile(_bogus=1)
    with pytest.raises(TypeError, match="missing"):  # checked against the method's signature at bind
        a.inc.bind()
    # None of that left a loop on the actor.
    assert ray.get(a.echo.remote("free"), timeout=30) == "free"


def test_inflight_bound_waits_then_names_the_bound(cluster):
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = a.sleep.bind(inp)
    compiled = dag.experimental_compile(_max_inflight_executions=2, _submit_timeout=0.5)
    refs = [compiled.execute(0.01) for _ in range(6)]  # past the bound: execute reads the oldest first
    assert ray.get(refs) == [0.01] * 6
    busy = [compiled.execute(1.0), compiled.execute(1.0)]
    with pytest.raises(ray.GetTimeoutError, match=r"_max_inflight_executions=2"):
        compiled.execute(0.0)
    assert ray.get(busy, timeout=10) == [1.0, 1.0]  # (nothing lost)
    # A get that times out leaves the graph usable.
    r = compiled.execute(0.0)
    assert ray.get(r, timeout=10) == 0.0
    slow = compiled.execute(1.0)
    with pytest.raises(ray.GetTimeoutError, match="gave no result within"):
        ray.get(slow, timeout=0.1)
    assert ray.get(slow, timeout=10) == 1.0
    compiled.teardown()


def test_async_actor(cluster):
    a = AsyncActor.remote()
    b = EchoActor.remote()
    with InputNode() as inp:
        dag = b.inc.bind(a.double.bind(inp))
    compiled = dag.experimental_compile()
    assert [ray.get(compiled.execute(i)) for i in range(4)] == [1, 3, 5, 7]
    compiled.teardown()
    assert ray.get(a.double.remote(5), timeout=30) == 10


def test_dropping_a_compiled_graph_frees_its_actors(cluster):
    a = EchoActor.remote()
    with InputNode() as inp:
        compiled = a.echo.bind(inp).experimental_compile()
    assert ray.get(compiled.execute(1)) == 1
    del compiled  # no teardown: its channel closes, the actor's loop sees the driver gone
    assert ray.get(a.echo.remote("free"), timeout=30) == "free"


@ray.remote(resources={"sim": 1})
class Stage:
    def host(self, x):
        return x + [os.getppid()]

    def pid(self):
        return os.getpid()


def test_chain_across_raylets_and_a_killed_stage():
    with loopback_nodes([None, {"sim": 1}, {"sim": 1}]) as nodes:
        a, b = Stage.remote(), Stage.remote()
        with InputNode() as inp:
            dag = b.host.bind(a.host.bind(inp))
        compiled = dag.experimental_compile()
        hosts = ray.get(compiled.execute([]), timeout=30)
        raylets = {p.pid: p for n, p in nodes.procs if n == "raylet"}
        assert len(set(hosts)) == 2 and set(hosts) <= set(raylets)  # one stage per sim node: TCP between them
        for i in range(20):
            assert ray.get(compiled.execute([i]), timeout=30) == [i] + hosts
        # b's process dies (SIGKILL): the next get names the rank that is gone.
        os.kill(_pid_of_stage(compiled, 2), signal.SIGKILL)
        with pytest.raises(ray.exceptions.RayActorError, match="is gone"):
            ray.get(compiled.execute([0]), timeout=30)
        wait_until(lambda: ray.get(a.host.remote([]), timeout=30) == [hosts[0]], what="a serves ordinary calls")


def _pid_of_stage(compiled, rank):
    """The process of rank `rank` of a compiled graph, from the name its channel gives it."""
    name = compiled._names[rank]
    return int(name.split("pid ")[1].split()[0])


def test_a_graph_that_makes_its_actors_runs_uncompiled_as_rays(cluster):
    # Ray's ClassNode: Actor.bind(...) makes the actor each time the graph runs; its methods bind as usual,
    # next to tasks (FunctionNode), and a node's options come back from get_options().
    @ray.remote
    class Adder:
        def __init__(self, k):
            self.k = k

        def add(self, x):
            return x + self.k

    adder = Adder.options(num_cpus=0).bind(10)
    assert adder.get_options() == {"num_cpus": 0} and adder.get_args() == (10,)
    with InputNode() as inp:
        dag = MultiOutputNode([adder.add.bind(plain_task.bind(inp)), adder.add.bind(inp)])
    assert ray.get(dag.execute(1), timeout=30) == [11, 11]
    assert ray.get(dag.execute(5), timeout=30) == [15, 15]
    with pytest.raises(AttributeError, match="has no method 'nope'"):
        adder.nope.bind(1)
    node = plain_task.options(num_cpus=0.5).bind(3)
    assert node.get_options() == {"num_cpus": 0.5}
    assert ray.get(node.execute(), timeout=30) == 3


def test_compiled_graph_ids_execute_async_and_the_context_defaults(cluster):
    import asyncio
    from phalanx.dag.context import DAGContext
    a = EchoActor.remote()
    with InputNode() as inp:
        dag = a.echo.bind(inp)
    context = DAGContext.get_current()
    before = context.submit_timeout
    context.submit_timeout = 3.5
    try:
        compiled = dag.experimental_compile()
    finally:
        context.submit_timeout = before
    try:
        assert compiled._submit_timeout == 3.5
        assert isinstance(compiled.get_id(), str) and len(compiled.get_id()) == 32

        async def run():
            fut = await compiled.execute_async("async")
            return await fut

        assert asyncio.run(run()) == "async"
    finally:
        compiled.teardown()
