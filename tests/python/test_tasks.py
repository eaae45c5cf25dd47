"""Remote functions end to end: submission, results, refs as arguments,
options, and the example from the single-node issue."""
import numpy as np
import pytest

import phalanx


@phalanx.remote
def square(x):
    return x * x


@phalanx.remote(num_returns=2, max_retries=2)
def split(a):
    return a[: len(a) // 2], a[len(a) // 2:]


@phalanx.remote
def add(a, b=0):
    return a + b


def test_issue_example(cluster):
    refs = [square.remote(i) for i in range(1000)]
    assert phalanx.get(refs) == [i * i for i in range(1000)]
    big = phalanx.put(np.ones(50_000_000, dtype=np.float32))
    left, right = split.remote(big)
    ready, not_ready = phalanx.wait([left, right], num_returns=1, timeout=10)
    assert len(ready) == 1 and len(not_ready) == 1
    view = phalanx.get(big)
    assert view.shape == (50_000_000,) and not view.flags.writeable
    l, r = phalanx.get([left, right])
    assert l.shape == (25_000_000,) and r.shape == (25_000_000,) and float(l[0] + r[-1]) == 2.0


def test_single_get_and_kwargs(cluster):
    assert phalanx.get(add.remote(1, b=2)) == 3
    assert phalanx.get(add.remote(a=5)) == 5


def test_ref_arguments_are_resolved_before_the_call(cluster):
    a = square.remote(3)
    b = add.remote(a, b=square.remote(4))
    assert phalanx.get(b) == 25


def test_chain_of_dependent_tasks(cluster):
    ref = phalanx.put(0)
    for _ in range(50):
        ref = add.remote(ref, 1)
    assert phalanx.get(ref) == 50


def test_options_override_num_returns(cluster):
    @phalanx.remote
    def three():
        return 1, 2, 3
    a, b, c = three.options(num_returns=3).remote()
    assert phalanx.get([a, b, c]) == [1, 2, 3]
    assert phalanx.get(three.remote()) == (1, 2, 3)


def test_large_argument_goes_through_the_store(cluster):
    arr = np.arange(1_000_000, dtype=np.int64)  # 8 MB: above the inline limit
    @phalanx.remote
    def total(x):
        return int(x.sum())
    assert phalanx.get(total.remote(arr)) == int(arr.sum())


def test_nested_refs_stay_alive_inside_values(cluster):
    inner = phalanx.put(np.full(100_000, 7, dtype=np.int32))
    outer = phalanx.put({"payload": inner})
    del inner
    @phalanx.remote
    def unwrap(d):
        return int(phalanx.get(d["payload"]).sum())
    assert phalanx.get(unwrap.remote(outer)) == 700_000


def test_task_can_submit_and_get_nested_tasks(cluster):
    @phalanx.remote
    def fan_out(n):
        return sum(phalanx.get([square.remote(i) for i in range(n)]))
    # More nested getters than CPUs: blocked workers lend their CPUs back.
    assert phalanx.get([fan_out.remote(10) for _ in range(4)]) == [285] * 4


def test_get_of_large_array_is_a_view_not_a_copy(cluster):
    ref = phalanx.put(np.zeros(25_000_000, dtype=np.float32))  # 100 MB
    a = phalanx.get(ref)
    b = phalanx.get(ref)
    # Two gets map the same shared-memory bytes.
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    with pytest.raises(ValueError):
        a[0] = 1


def test_wait_returns_in_given_order_and_respects_timeout(cluster):
    @phalanx.remote
    def sleepy(t):
        import time
        time.sleep(t)
        return t
    slow = sleepy.remote(3)
    fast = [square.remote(i) for i in range(3)]
    ready, not_ready = phalanx.wait(fast + [slow], num_returns=3, timeout=20)
    assert ready == fast and not_ready == [slow]
    ready, not_ready = phalanx.wait([slow], num_returns=1, timeout=0.2)
    assert ready == [] and not_ready == [slow]


def test_put_get_roundtrip_of_python_values(cluster):
    values = [None, 1, "text", b"bytes", [1, 2, {"a": (3, 4)}], {"k": np.arange(5)}]
    refs = [phalanx.put(v) for v in values]
    got = phalanx.get(refs)
    assert got[:5] == values[:5]
    assert np.array_equal(got[5]["k"], np.arange(5))


def test_closures_and_lambdas_ship_by_value(cluster):
    k = 11
    f = phalanx.remote(lambda x: x + k)
    assert phalanx.get(f.remote(1)) == 12
