"""Ray's "Ray Generators" page (docs.ray.io/en/latest/ray-core/ray-generator.html)
and its "Dynamic generators" page (ray-core/tasks/dynamic_generators.html), as
the documentation writes them, with `import phalanx as ray`. Sleeps are
shortened; what the pages say a call prints or returns is asserted."""
import asyncio
import time

import pytest

import phalanx as ray


def test_getting_started_and_error_handling(cluster):
    # "Generator tasks stream outputs back to the caller before the task finishes."
    @ray.remote
    def task():
        for i in range(5):
            time.sleep(0.2)
            yield i

    start = time.monotonic()
    gen = task.remote()
    # Blocks until the first value is made (0.2 s here), not until the task ends.
    ref = next(gen)
    assert ray.get(ref) == 0
    assert time.monotonic() - start < 0.8
    # return 1
    ref2 = next(gen)
    assert ray.get(ref2) == 1
    # "Ray generators are compatible with the Python generator interface."
    assert [ray.get(ref) for ref in gen] == [2, 3, 4]

    # Error handling: "If a generator task has a failure (by an application
    # exception or system error such as an unexpected node failure), the
    # next(gen) returns an object reference that contains an exception."
    @ray.remote
    def task_fails():
        for i in range(5):
            time.sleep(0.05)
            if i == 1:
                raise ValueError
            yield i

    gen = task_fails.remote()
    # it's okay.
    assert ray.get(next(gen)) == 0
    # Raises an exception
    with pytest.raises(ValueError):
        ray.get(next(gen))
    # "Subsequent next(gen) raises StopIteration"
    with pytest.raises(StopIteration):
        next(gen)


def test_generator_from_actor_tasks(cluster):
    # "The Ray generator is compatible with all actor execution models. It
    # seamlessly works with regular actors, async actors, and threaded actors."
    @ray.remote
    class Actor:
        def f(self):
            for i in range(5):
                yield i

    @ray.remote
    class AsyncActor:
        async def f(self):
            for i in range(5):
                yield i

    @ray.remote(max_concurrency=5)
    class ThreadedActor:
        def f(self):
            for i in range(5):
                yield i

    actor = Actor.remote()
    assert [ray.get(ref) for ref in actor.f.remote()] == list(range(5))

    actor = AsyncActor.remote()
    assert [ray.get(ref) for ref in actor.f.remote()] == list(range(5))

    actor = ThreadedActor.remote()
    assert [ray.get(ref) for ref in actor.f.remote()] == list(range(5))


def test_using_the_generator_with_asyncio(cluster):
    @ray.remote
    def task():
        for i in range(5):
            time.sleep(0.05)
            yield i

    async def main():
        out = []
        async for ref in task.remote():
            out.append(await ref)
        return out

    assert asyncio.run(main()) == list(range(5))


def test_garbage_collection_of_object_references(cluster):
    @ray.remote
    def task():
        for i in range(5):
            time.sleep(0.05)
            yield i

    gen = task.remote()
    ref1 = next(gen)
    del gen
    # "ref1 is a normal Ray object reference after Ray returns it. Other
    # references that aren't consumed with next(gen) are removed when the
    # ObjectRefGenerator is GC'ed."
    assert ray.get(ref1) == 0


def test_wait_for_generators_without_blocking_a_thread(cluster):
    @ray.remote
    def task():
        for i in range(5):
            time.sleep(0.2)
            yield i

    gen = task.remote()
    # "ray.wait returns a generator as ready when its next reference is available."
    ready, unready = ray.wait([gen], timeout=0)
    assert ready == [] and unready == [gen]  # timeout 0, nothing is ready
    time.sleep(0.5)
    ready, unready = ray.wait([gen], timeout=0)
    assert ready == [gen]  # a generator is ready
    assert ray.get(next(gen)) == 0

    # The page's loop over a mix of generators and refs.
    @ray.remote
    def generator_task():
        for i in range(5):
            time.sleep(0.05)
            yield i

    @ray.remote
    def regular_task():
        for i in range(5):
            time.sleep(0.05)
        return

    gen = [generator_task.remote()]
    ref = [regular_task.remote()]
    ready, unready = [], [*gen, *ref]
    result = []

    while unready:
        ready, unready = ray.wait(unready)
        for r in ready:
            if isinstance(r, ray.ObjectRefGenerator):
                try:
                    ref = next(r)
                    result.append(ray.get(ref))
                except StopIteration:
                    pass
                else:
                    unready.append(r)
            else:
                result.append(ray.get(r))
    assert sorted(result, key=str) == sorted([0, 1, 2, 3, 4, None], key=str)


def test_dynamic_generators(cluster):
    # "num_returns set by the task caller": a generator yields the number the caller asked for.
    @ray.remote(num_returns=3)
    def return_multiple_as_generator():
        for i in range(3):
            yield i

    a, b, c = return_multiple_as_generator.remote()
    assert ray.get([a, b, c]) == [0, 1, 2]

    # "num_returns set by the task executor"
    @ray.remote(num_returns="dynamic")
    def split(array, chunk_size):
        while len(array) > 0:
            yield array[:chunk_size]
            array = array[chunk_size:]

    array_ref = ray.put(list(range(10)))
    dynamic_ref = split.remote(array_ref, 3)
    ref_generator = ray.get(dynamic_ref)
    assert [ray.get(ref) for ref in ref_generator] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    # "...the generator can be passed to another task, which gets the values"
    @ray.remote
    def get_size(ref_generator):
        return [len(ray.get(r)) for r in ref_generator]

    assert ray.get(get_size.remote(dynamic_ref)) == [3, 3, 3, 1]

    # Exception handling: "If a generator function raises an exception before
    # yielding all its values, ... ray.get on the dynamic ref raises."
    @ray.remote(num_returns="dynamic")
    def generator():
        for i in range(2):
            yield i
        raise Exception("error")

    with pytest.raises(Exception, match="error"):
        ray.get(generator.remote())
