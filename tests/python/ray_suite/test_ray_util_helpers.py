"""ray.util.as_completed and ray.util.map_unordered as Ray's `python/ray/tests/test_util_helpers.py` checks
them (ray-project/ray); each test is named after the Ray test it follows. Ray's module fixture
`ray_init_4_cpu_shared` (4 CPUs, one cluster for the module) is the suite's `ray_start_regular_shared`;
Ray's SignalActor is suite_utils' Signal. Each task waits for its own signal, sent in reverse order (the
smallest value first), so the order of completion is the test's, not the machine's: five tasks on four CPUs
all run, since a task blocked in ray.get lends its CPU."""
import pytest

import ray
from ray.util import as_completed, map_unordered
from suite_utils import Signal as SignalActor

# The chunk_size=1 tests send the fifth task's signal first: that task starts only once a CPU is lent by one
# of the four tasks blocked in ray.get on their own actor calls' results (WORKER_BLOCKED: worker/blocked_notice.h).


@pytest.mark.parametrize("yield_obj_refs", [True, False])
def test_as_completed_chunk_size_1(ray_start_regular_shared, yield_obj_refs):
    inputs = [10, 8, 6, 4, 2]
    signals = [SignalActor.remote() for _ in range(len(inputs))]

    @ray.remote
    def f(x, signal):
        ray.get(signal.wait.remote())
        return x

    # Tasks submitted in the inputs' order.
    refs = [f.remote(x, signal) for x, signal in zip(inputs, signals)]

    # as_completed, lazily.
    it = as_completed(refs, chunk_size=1, yield_obj_refs=yield_obj_refs)

    # Signals sent in reverse order (as time.sleep(x) would: the smallest first), each result taken as it comes.
    results = []
    for signal in reversed(signals):
        ray.get(signal.send.remote())
        results.append(next(it))

    if yield_obj_refs:
        results = ray.get(results)

    assert results == [2, 4, 6, 8, 10]


@pytest.mark.parametrize("yield_obj_refs", [True, False])
def test_as_completed_chunk_size_2(ray_start_regular_shared, yield_obj_refs):
    inputs = [10, 8, 6, 4, 2]
    signals = [SignalActor.remote() for _ in range(len(inputs))]

    @ray.remote
    def f(x, signal):
        ray.get(signal.wait.remote())
        return x

    refs = [f.remote(x, signal) for x, signal in zip(inputs, signals)]

    it = as_completed(refs, chunk_size=2, yield_obj_refs=yield_obj_refs)

    # Two at a time: each pair comes in the order the refs were given.
    results = []

    ray.get(signals[4].send.remote())
    ray.get(signals[3].send.remote())
    results.append(next(it))
    results.append(next(it))

    ray.get(signals[2].send.remote())
    ray.get(signals[1].send.remote())
    results.append(next(it))
    results.append(next(it))

    ray.get(signals[0].send.remote())
    results.append(next(it))

    if yield_obj_refs:
        results = ray.get(results)

    assert results == [4, 2, 8, 6, 10]


@pytest.mark.parametrize("yield_obj_refs", [True, False])
def test_map_unordered_chunk_size_1(ray_start_regular_shared, yield_obj_refs):
    inputs = [10, 8, 6, 4, 2]
    signals = [SignalActor.remote() for _ in range(len(inputs))]

    @ray.remote
    def f(args):
        x, signal = args
        ray.get(signal.wait.remote())
        return x

    # Tasks submitted in the inputs' order.
    it = map_unordered(f, zip(inputs, signals), chunk_size=1, yield_obj_refs=yield_obj_refs)

    # Signals sent in reverse order, each result taken as it comes.
    results = []
    for signal in reversed(signals):
        ray.get(signal.send.remote())
        results.append(next(it))

    if yield_obj_refs:
        results = ray.get(results)

    assert results == [2, 4, 6, 8, 10]


@pytest.mark.parametrize("yield_obj_refs", [True, False])
def test_map_unordered_chunk_size_2(ray_start_regular_shared, yield_obj_refs):
    inputs = [10, 8, 6, 4, 2]
    signals = [SignalActor.remote() for _ in range(len(inputs))]

    @ray.remote
    def f(args):
        x, signal = args
        ray.get(signal.wait.remote())
        return x

    it = map_unordered(f, zip(inputs, signals), chunk_size=2, yield_obj_refs=yield_obj_refs)

    # Two at a time: each pair comes in the order the items were given.
    results = []

    ray.get(signals[4].send.remote())
    ray.get(signals[3].send.remote())
    results.append(next(it))
    results.append(next(it))

    ray.get(signals[2].send.remote())
    ray.get(signals[1].send.remote())
    results.append(next(it))
    results.append(next(it))

    ray.get(signals[0].send.remote())
    results.append(next(it))

    if yield_obj_refs:
        results = ray.get(results)

    assert results == [4, 2, 8, 6, 10]
