"""ray.wait, ray.get and ObjectRefs as Ray's `python/ray/tests/test_basic_2.py`, `test_wait.py`-style
tests and `test_object_ref.py`-style tests check them (ray-project/ray); each test is named after the Ray
test it follows."""
import asyncio
import time

import numpy as np
import pytest

import ray
from suite_utils import Gate


@ray.remote
def wait_for_gate(gate, value):
    while not ray.get(gate.is_open.remote()):
        time.sleep(0.01)
    return value


def test_wait(ray_start_regular_shared):
    @ray.remote
    def f(delay):
        time.sleep(delay)
        return delay

    object_refs = [f.remote(0), f.remote(0), f.remote(0), f.remote(0)]
    ready_ids, remaining_ids = ray.wait(object_refs, num_returns=4, timeout=30)
    assert len(ready_ids) == 4 and len(remaining_ids) == 0

    gate = Gate.remote()
    object_refs = [f.remote(0), wait_for_gate.remote(gate, 1), f.remote(0)]
    ready_ids, remaining_ids = ray.wait(object_refs, num_returns=2, timeout=30)
    assert len(ready_ids) == 2 and len(remaining_ids) == 1
    ready_ids, remaining_ids = ray.wait(object_refs, num_returns=3, timeout=0.2)
    assert len(ready_ids) == 2 and len(remaining_ids) == 1
    ray.get(gate.open.remote())

    # Order: ready ones in the order given.
    refs = [ray.put(i) for i in range(5)]
    ready, rest = ray.wait(refs, num_returns=5)
    assert ready == refs and rest == []


def test_wait_iterables(ray_start_regular_shared):
    refs = (ray.put(1), ray.put(2))
    ready, rest = ray.wait(list(refs), num_returns=2, timeout=10)
    assert len(ready) == 2 and rest == []


def test_wait_empty_list(ray_start_regular_shared):
    assert ray.wait([]) == ([], [])


def test_wait_duplicate_refs_is_an_error(ray_start_regular_shared):
    ref = ray.put(1)
    with pytest.raises(ValueError):
        ray.wait([ref, ref])


def test_wait_num_returns_too_large(ray_start_regular_shared):
    with pytest.raises(ValueError):
        ray.wait([ray.put(1)], num_returns=2)


def test_wait_single_ref_is_an_error(ray_start_regular_shared):
    with pytest.raises(TypeError):
        ray.wait(ray.put(1))


def test_wait_timeout_zero(ray_start_regular_shared):
    gate = Gate.remote()
    pending = wait_for_gate.remote(gate, 1)
    done = ray.put(2)
    ready, rest = ray.wait([pending, done], num_returns=2, timeout=0)
    assert ready == [done] and rest == [pending]
    ray.get(gate.open.remote())


def test_wait_timing(ray_start_regular_shared):
    gate = Gate.remote()
    pending = wait_for_gate.remote(gate, 1)
    start = time.monotonic()
    ready, _ = ray.wait([pending], timeout=0.5)
    elapsed = time.monotonic() - start
    assert ready == [] and 0.4 < elapsed < 5
    ray.get(gate.open.remote())


def test_get_list_order(ray_start_regular_shared):
    @ray.remote
    def f(i):
        time.sleep(0.01 * (5 - i))
        return i

    assert ray.get([f.remote(i) for i in range(5)]) == list(range(5))


def test_get_non_ref_in_list_is_an_error(ray_start_regular_shared):
    with pytest.raises(TypeError):
        ray.get([ray.put(1), 2])


def test_object_ref_hex_and_equality(ray_start_regular_shared):
    ref = ray.put(1)
    same = ray.get(ray.put([ref]))[0]
    assert ref == same
    assert hash(ref) == hash(same)
    assert ref.hex() == same.hex()
    assert isinstance(ref.hex(), str)
    assert ref != ray.put(1)
    assert len({ref, same}) == 1


def test_object_ref_binary_roundtrip(ray_start_regular_shared):
    ref = ray.put("v")
    assert isinstance(ref.binary(), bytes)
    assert ray.ObjectRef(ref.binary()) == ref


def test_object_ref_future(ray_start_regular_shared):
    @ray.remote
    def f():
        return 9

    fut = f.remote().future()
    assert fut.result(timeout=30) == 9


def test_object_ref_await(ray_start_regular_shared):
    @ray.remote
    def f():
        return 8

    async def main():
        return await f.remote()

    assert asyncio.run(main()) == 8


def test_object_ref_in_dict_value(ray_start_regular_shared):
    @ray.remote
    def f(d):
        return ray.get(d["ref"]) + 1

    assert ray.get(f.remote({"ref": ray.put(1)})) == 2


def test_put_object_ref_is_an_error(ray_start_regular_shared):
    ref = ray.put(1)
    with pytest.raises(TypeError):
        ray.put(ref)


def test_numpy_zero_copy_get(ray_start_regular_shared):
    array = np.arange(10 * 1024 * 1024, dtype=np.uint8)
    ref = ray.put(array)
    a = ray.get(ref)
    b = ray.get(ref)
    # Both reads map the store's one copy.
    assert a.ctypes.data == b.ctypes.data


def test_ref_passed_through_actor(ray_start_regular_shared):
    @ray.remote
    class Keeper:
        def __init__(self):
            self.refs = []

        def keep(self, refs):
            self.refs = refs

        def read(self):
            return ray.get(self.refs)

    k = Keeper.remote()
    ray.get(k.keep.remote([ray.put(i) for i in range(3)]))
    assert ray.get(k.read.remote()) == [0, 1, 2]


def test_nested_get_in_task_releases_cpu(shutdown_only, init_kwargs):
    ray.init(num_cpus=1, **init_kwargs)

    @ray.remote
    def child(i):
        return i

    @ray.remote
    def parent(i):
        return ray.get(child.remote(i)) + 1

    assert ray.get([parent.remote(i) for i in range(20)], timeout=60) == [i + 1 for i in range(20)]


def test_deeply_nested_refs(ray_start_regular_shared):
    ref = ray.put(0)
    for _ in range(20):
        ref = ray.put([ref])
    value = ray.get(ref)
    for _ in range(20):
        value = ray.get(value[0])
    assert value == 0


def test_get_timeout_none_waits(ray_start_regular_shared):
    @ray.remote
    def f():
        time.sleep(0.3)
        return 1

    assert ray.get(f.remote(), timeout=None) == 1
