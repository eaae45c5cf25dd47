"""Ray's "Design patterns and anti-patterns" pages
(docs.ray.io/en/latest/ray-core/patterns/index.html), as the documentation
writes them, with `import phalanx as ray`. Sizes and sleeps are scaled
down; what the pages say the programs return is asserted."""
import asyncio
import math

import numpy as np

import phalanx as ray

global_var = 3


def test_limit_pending_tasks_with_wait(cluster):
    # patterns/limit-pending-tasks.html
    @ray.remote
    class Actor:
        async def heavy_compute(self):
            # taking a long time...
            await asyncio.sleep(0.001)
            return

    actor = Actor.remote()
    NUM_TASKS = 1000
    MAX_NUM_PENDING_TASKS = 100
    result_refs = []
    for _ in range(NUM_TASKS):
        if len(result_refs) > MAX_NUM_PENDING_TASKS:
            # update result_refs to only track the remaining tasks.
            ready_refs, result_refs = ray.wait(result_refs, num_returns=1)
            ray.get(ready_refs)
            assert len(result_refs) <= MAX_NUM_PENDING_TASKS
        result_refs.append(actor.heavy_compute.remote())
    assert ray.get(result_refs) == [None] * len(result_refs)


def test_actor_to_synchronize_other_tasks(cluster):
    # patterns/actor-sync.html
    @ray.remote(num_cpus=0)
    class SignalActor:
        def __init__(self):
            self.ready_event = asyncio.Event()

        def send(self, clear=False):
            self.ready_event.set()
            if clear:
                self.ready_event.clear()

        async def wait(self, should_wait=True):
            if should_wait:
                await self.ready_event.wait()

    @ray.remote
    def wait_and_go(signal):
        ray.get(signal.wait.remote())
        return "go!"

    signal = SignalActor.remote()
    tasks = [wait_and_go.remote(signal) for _ in range(4)]
    # Tasks will all be waiting for the signals.
    ready, _ = ray.wait(tasks, num_returns=4, timeout=0.5)
    assert ready == []
    ray.get(signal.send.remote())
    # Tasks are unblocked.
    assert ray.get(tasks, timeout=30) == ["go!"] * 4


def test_supervisor_actor_tree(fresh_cluster):
    # patterns/tree-of-actors.html
    fresh_cluster(num_cpus=4)

    @ray.remote(num_cpus=1)
    class Worker:
        def work(self):
            return "done"

    @ray.remote(num_cpus=1)
    class Supervisor:
        def __init__(self):
            self.workers = [Worker.remote() for _ in range(3)]

        def work(self):
            return ray.get([w.work.remote() for w in self.workers])

    sup = Supervisor.remote()
    assert ray.get(sup.work.remote(), timeout=60) == ["done", "done", "done"]


def test_pipelining(cluster):
    # patterns/pipelining.html
    @ray.remote
    class WorkQueue:
        def __init__(self):
            self.queue = list(range(10))

        def get_work_item(self):
            if self.queue:
                return self.queue.pop(0)
            else:
                return None

    @ray.remote
    class WorkerWithoutPipelining:
        def __init__(self, work_queue):
            self.work_queue = work_queue
            self.done = []

        def process(self, work_item):
            self.done.append(work_item)

        def run(self):
            while True:
                # Get work from the remote queue.
                work_item = ray.get(self.work_queue.get_work_item.remote())
                if work_item is None:
                    break
                # Do work.
                self.process(work_item)
            return self.done

    @ray.remote
    class WorkerWithPipelining:
        def __init__(self, work_queue):
            self.work_queue = work_queue
            self.done = []

        def process(self, work_item):
            self.done.append(work_item)

        def run(self):
            self.work_item_ref = self.work_queue.get_work_item.remote()
            while True:
                # Get work from the remote queue.
                work_item = ray.get(self.work_item_ref)
                if work_item is None:
                    break
                self.work_item_ref = self.work_queue.get_work_item.remote()
                # Do work while we are fetching the next work item.
                self.process(work_item)
            return self.done

    work_queue = WorkQueue.remote()
    worker_without_pipelining = WorkerWithoutPipelining.remote(work_queue)
    assert ray.get(worker_without_pipelining.run.remote()) == list(range(10))
    work_queue = WorkQueue.remote()
    worker_with_pipelining = WorkerWithPipelining.remote(work_queue)
    assert ray.get(worker_with_pipelining.run.remote()) == list(range(10))


def test_nested_tasks_quick_sort(cluster):
    # patterns/nested-tasks.html (sizes / 40)
    def partition(collection):
        # Use the last element as the pivot
        pivot = collection.pop()
        greater, lesser = [], []
        for element in collection:
            if element > pivot:
                greater.append(element)
            else:
                lesser.append(element)
        return lesser, pivot, greater

    @ray.remote
    def quick_sort_distributed(collection):
        # Tiny tasks are an antipattern: a "magic number" toggles distributed recursion.
        if len(collection) <= 5000:  # magic number
            return sorted(collection)
        else:
            lesser, pivot, greater = partition(collection)
            lesser = quick_sort_distributed.remote(lesser)
            greater = quick_sort_distributed.remote(greater)
            return ray.get(lesser) + [pivot] + ray.get(greater)

    rng = np.random.default_rng(0)
    unsorted = rng.integers(0, 1 << 30, 100000).tolist()
    assert ray.get(quick_sort_distributed.remote(unsorted), timeout=120) == sorted(unsorted)


def test_returning_put_refs_from_tasks(cluster):
    # patterns/return-ray-put.html
    @ray.remote
    def task_with_single_small_return_value_bad():
        small_return_value = 1
        # The value will be stored in the object store
        # and the reference is returned to the caller.
        small_return_value_ref = ray.put(small_return_value)
        return small_return_value_ref

    @ray.remote
    def task_with_single_small_return_value_good():
        small_return_value = 1
        # Ray will return the value inline to the caller
        # which is faster than the previous approach.
        return small_return_value

    assert ray.get(ray.get(task_with_single_small_return_value_bad.remote())) == ray.get(
        task_with_single_small_return_value_good.remote())

    @ray.remote
    def task_with_single_large_return_value_bad():
        large_return_value = np.zeros(1024 * 1024)
        large_return_value_ref = ray.put(large_return_value)
        return large_return_value_ref

    @ray.remote
    def task_with_single_large_return_value_good():
        # Both approaches will store the large array to the object store
        # but this is better since it's faster and more fault tolerant.
        large_return_value = np.zeros(1024 * 1024)
        return large_return_value

    assert np.array_equal(ray.get(ray.get(task_with_single_large_return_value_bad.remote())),
                          ray.get(task_with_single_large_return_value_good.remote()))

    # Same for actor tasks
    @ray.remote
    class Actor:
        def task_with_single_return_value_bad(self):
            single_return_value = np.zeros(1024 * 1024)
            return ray.put(single_return_value)

        def task_with_single_return_value_good(self):
            return np.zeros(1024 * 1024)

        @ray.method(num_returns=1)
        def task_with_static_multiple_returns_bad1(self):
            return_value_1_ref = ray.put(1)
            return_value_2_ref = ray.put(2)
            return (return_value_1_ref, return_value_2_ref)

        @ray.method(num_returns=2)
        def task_with_static_multiple_returns_bad2(self):
            return_value_1_ref = ray.put(1)
            return_value_2_ref = ray.put(2)
            return (return_value_1_ref, return_value_2_ref)

        @ray.method(num_returns=2)
        def task_with_static_multiple_returns_good(self):
            # This is faster and more fault tolerant.
            return_value_1 = 1
            return_value_2 = 2
            return (return_value_1, return_value_2)

    actor = Actor.remote()
    assert np.array_equal(ray.get(ray.get(actor.task_with_single_return_value_bad.remote())),
                          ray.get(actor.task_with_single_return_value_good.remote()))
    assert (ray.get(ray.get(actor.task_with_static_multiple_returns_bad1.remote())[0])
            == ray.get(ray.get(actor.task_with_static_multiple_returns_bad2.remote()[0]))
            == ray.get(actor.task_with_static_multiple_returns_good.remote()[0]) == 1)

    @ray.remote(num_returns=1)
    def task_with_static_multiple_returns_bad1():
        return_value_1_ref = ray.put(1)
        return_value_2_ref = ray.put(2)
        return (return_value_1_ref, return_value_2_ref)

    @ray.remote(num_returns=2)
    def task_with_static_multiple_returns_bad2():
        return_value_1_ref = ray.put(1)
        return_value_2_ref = ray.put(2)
        return (return_value_1_ref, return_value_2_ref)

    @ray.remote(num_returns=2)
    def task_with_static_multiple_returns_good():
        return_value_1 = 1
        return_value_2 = 2
        return (return_value_1, return_value_2)

    assert (ray.get(ray.get(task_with_static_multiple_returns_bad1.remote())[0])
            == ray.get(ray.get(task_with_static_multiple_returns_bad2.remote()[0]))
            == ray.get(task_with_static_multiple_returns_good.remote()[0]) == 1)


def test_ray_get_in_a_loop(cluster):
    # patterns/ray-get-loop.html
    @ray.remote
    def f(i):
        return i

    # Anti-pattern: no parallelism due to calling ray.get inside of the loop.
    sequential_returns = []
    for i in range(100):
        sequential_returns.append(ray.get(f.remote(i)))

    # Better approach: parallelism because the tasks are executed in parallel.
    refs = []
    for i in range(100):
        refs.append(f.remote(i))
    parallel_returns = ray.get(refs)
    assert sequential_returns == parallel_returns


def test_global_variables_are_not_shared(cluster):
    # patterns/global-variables.html
    global global_var

    @ray.remote
    class Actor:
        def f(self):
            return global_var + 3

    actor = Actor.remote()
    global_var = 4
    try:
        # This returns 6, not 7: the change of global_var in the driver is
        # not reflected in the actor, which runs in another process.
        assert ray.get(actor.f.remote()) == 6
    finally:
        global_var = 3


def test_pass_large_arg_by_value(cluster):
    # patterns/pass-large-arg-by-value.html (a 1000x1000 array instead of 5000x5000)
    @ray.remote
    def do_work(a):
        # do some work with the large object a
        return np.sum(a)

    np.random.seed(0)
    a = np.random.rand(1000, 1000)
    # Sending the big array to each remote task.
    result_ids = [do_work.remote(a) for x in range(10)]
    results = math.fsum(ray.get(result_ids))
    # Adding the big array into the object store first to avoid multiple copies
    a_id = ray.put(a)
    result_ids = [do_work.remote(a_id) for x in range(10)]
    results2 = math.fsum(ray.get(result_ids))
    assert results == results2


def test_closure_capturing_large_objects(cluster):
    # patterns/closure-capture-large-objects.html
    large_object = np.zeros(10 * 1024 * 1024)

    @ray.remote
    def f1():
        return len(large_object)  # large_object is serialized along with f1!

    large_object_ref = ray.put(np.zeros(10 * 1024 * 1024))

    @ray.remote
    def f2(large_object):
        return len(large_object)

    # Large object is passed through object store.
    assert ray.get(f1.remote()) == ray.get(f2.remote(large_object_ref)) == 10 * 1024 * 1024
