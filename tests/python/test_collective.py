"""phalanx.collective: reduce / allreduce / gather of numpy arrays, combined by
the raylet as the inputs become ready."""
import time

import numpy as np
import pytest

import phalanx
from conftest import wait_until


@phalanx.remote
def make(value, n, dtype="float32", delay=0.0):
    time.sleep(delay)
    return np.full(n, value, dtype=dtype)


@phalanx.remote
def fail(delay=0.0):
    time.sleep(delay)
    raise RuntimeError("simulator crashed")


NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
                                   "uint8", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_reduce_matches_numpy_for_every_op_and_dtype(cluster, op, dtype):
    rng = np.random.default_rng(7)
    arrays = [rng.integers(1, 4, size=(3, 5)).astype(dtype) for _ in range(4)]
    out = phalanx.get(phalanx.collective.reduce([phalanx.put(a) for a in arrays], op=op))
    expect = arrays[0].copy()
    for a in arrays[1:]:
        expect = NUMPY_OPS[op](expect, a)
    assert out.dtype == np.dtype(dtype) and out.shape == (3, 5)
    np.testing.assert_array_equal(out, expect)


@pytest.mark.parametrize("n", [7, 300_000, 4 << 20])  # inline, store, store on the helper thread
def test_reduce_of_task_results_inline_and_in_the_store(cluster, n):
    refs = [make.remote(i, n) for i in range(1, 6)]
    out = phalanx.get(phalanx.collective.reduce(refs, op="sum"), timeout=60)
    assert out.shape == (n,) and out[0] == 15 and out[-1] == 15


def test_reduce_takes_the_first_inputs_to_arrive(cluster):
    # Input 2 is ready at once, input 0 after 0.3 s, input 1 only after 8 s.
    refs = [make.remote(1, 4, delay=0.3), make.remote(10, 4, delay=8), phalanx.put(np.full(4, 100, np.float32))]
    start = time.monotonic()
    part = phalanx.collective.reduce(refs, op="sum", num_objects=2)
    np.testing.assert_array_equal(phalanx.get(part, timeout=10), np.full(4, 101, np.float32))
    assert time.monotonic() - start < 6, "the reduce waited for the slow input"
    used = phalanx.collective.reduced_inputs(part, timeout=5)
    assert used == [refs[2], refs[0]]


def test_mismatched_inputs_raise_an_error_naming_them(cluster):
    a, b = phalanx.put(np.ones(4, np.float32)), phalanx.put(np.ones(4, np.int32))
    with pytest.raises(phalanx.CollectiveError, match=r"input 0 \(ObjectRef\(" + a.hex() + r"\)\) is float32.*"
                       r"input 1 \(ObjectRef\(" + b.hex() + r"\)\) is int32"):
        phalanx.get(phalanx.collective.reduce([a, b]))
    c = phalanx.put(np.ones((2, 2), np.float32))
    with pytest.raises(phalanx.CollectiveError, match="input 1 .* same dtype and size but a different shape"):
        phalanx.get(phalanx.collective.reduce([a, c]))
    with pytest.raises(phalanx.CollectiveError, match="input 1 .* not a C-contiguous numpy array"):
        phalanx.get(phalanx.collective.reduce([a, phalanx.put({"not": "an array"})]))
    # The inputs are untouched and still readable.
    np.testing.assert_array_equal(phalanx.get(a), np.ones(4, np.float32))


def test_a_failed_input_is_replaced_by_a_spare_or_named(cluster):
    refs = [fail.remote(), make.remote(2, 4, delay=0.2), make.remote(3, 4, delay=0.2)]
    out = phalanx.collective.reduce(refs, op="sum", num_objects=2)
    np.testing.assert_array_equal(phalanx.get(out, timeout=10), np.full(4, 5, np.float32))
    refs = [fail.remote(), make.remote(2, 4)]
    with pytest.raises(phalanx.CollectiveError,
                       match=r"needs 2 of its 2 inputs, but 1 failed: input 0 .*its task raised"):
        phalanx.get(phalanx.collective.reduce(refs), timeout=10)


def test_timeout_names_the_missing_inputs(cluster):
    slow = make.remote(1, 4, delay=30)
    refs = [phalanx.put(np.ones(4, np.float32)), slow]
    start = time.monotonic()
    with pytest.raises(phalanx.GetTimeoutError, match=r"1 of 2 inputs combined; still waiting for input 1 "
                                                       r"\(ObjectRef\(" + slow.hex()):
        phalanx.get(phalanx.collective.reduce(refs, timeout=0.5), timeout=20)
    assert time.monotonic() - start < 5


def test_bad_calls_are_refused_at_once(cluster):
    ref = phalanx.put(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="unknown reduce op 'mean'"):
        phalanx.collective.reduce([ref], op="mean")
    with pytest.raises(ValueError, match="num_objects must be between 1 and 1"):
        phalanx.collective.reduce([ref], num_objects=2)
    with pytest.raises(TypeError, match="input 1 is a ndarray, not an ObjectRef"):
        phalanx.collective.reduce([ref, np.ones(4)])
    with pytest.raises(ValueError, match="empty"):
        phalanx.collective.reduce([])


def test_allreduce_and_gather(cluster):
    refs = [make.remote(i, 1000) for i in range(4)]
    everyone = phalanx.collective.allreduce(refs, op="max")
    assert len(everyone) == 4
    for v in phalanx.get(everyone):
        np.testing.assert_array_equal(v, np.full(1000, 3, np.float32))
    values = phalanx.collective.gather(refs)
    assert [int(v[0]) for v in values] == [0, 1, 2, 3]


def test_reduce_of_actor_results_and_reuse_as_an_argument(cluster):
    @phalanx.remote
    class Sim:
        def __init__(self, k):
            self.k = k

        def gradient(self, policy):
            return policy * self.k

    sims = [Sim.remote(k) for k in range(1, 4)]
    policy = phalanx.put(np.ones(200_000, np.float32))
    total = phalanx.collective.reduce([s.gradient.remote(policy) for s in sims])

    @phalanx.remote
    def norm(x):
        return float(np.abs(x).max())

    assert phalanx.get(norm.remote(total), timeout=30) == 6.0


def test_reduce_holds_nothing_once_done(cluster):
    before = phalanx.cluster_stats()
    refs = [phalanx.put(np.ones(1 << 20, np.float32)) for _ in range(3)]
    out = phalanx.collective.reduce(refs)
    assert phalanx.get(out)[0] == 3
    del refs, out
    # (<=: objects of earlier tests may be freed meanwhile; none of this one's may stay.)
    wait_until(lambda: phalanx.cluster_stats()["store_objects"] <= before["store_objects"],
               timeout=10, what="inputs and result to be freed")


@phalanx.remote
class Member:
    def __init__(self, world, rank, group):
        self.rank, self.group = rank, group
        phalanx.collective.init_group(world, rank, group, timeout=30)

    def run(self):
        r, g = self.rank, self.group
        a = np.full(6, r + 1, np.float32)
        phalanx.collective.allreduce(a, op="sum", group_name=g, timeout=30)
        b = np.full(3, r, np.int64) if r == 1 else np.zeros(3, np.int64)
        phalanx.collective.broadcast(b, src_rank=1, group_name=g, timeout=30)
        gathered = [np.zeros(2, np.float64) for _ in range(3)]
        phalanx.collective.allgather(gathered, np.full(2, r * 10.0), group_name=g, timeout=30)
        part = np.zeros(2, np.float32)
        phalanx.collective.reducescatter(part, [np.full(2, r + 1, np.float32) for _ in range(3)], op="max",
                                         group_name=g, timeout=30)
        phalanx.collective.barrier(group_name=g, timeout=30)
        return a.tolist(), b.tolist(), [x.tolist() for x in gathered], part.tolist()


def test_static_group_collectives_in_place(cluster):
    members = [Member.remote(3, r, "g1") for r in range(3)]
    out = phalanx.get([m.run.remote() for m in members], timeout=120)
    for a, b, gathered, part in out:
        assert a == [6.0] * 6
        assert b == [1, 1, 1]
        assert gathered == [[0.0, 0.0], [10.0, 10.0], [20.0, 20.0]]
        assert part == [3.0, 3.0]


def test_static_group_errors(cluster):
    with pytest.raises(ValueError, match="not in group 'nope'"):
        phalanx.collective.barrier(group_name="nope")
    with pytest.raises(ValueError, match="rank must be between 0 and 1"):
        phalanx.collective.init_group(2, 5, "bad")
    # A group forms once every rank has joined; a rank alone says who is missing.
    with pytest.raises(phalanx.GetTimeoutError, match="'alone' was not formed.*1 of 2 did; missing rank 0"):
        phalanx.collective.init_group(2, 1, "alone", timeout=0.3)
    # Rank 1 joins and then makes no call: rank 0's call names it.
    member = Member.remote(2, 1, "pair")
    phalanx.collective.init_group(2, 0, "pair", timeout=30)
    try:
        with pytest.raises(phalanx.GetTimeoutError, match="group 'pair' allreduce .call 1.: no answer within 0.5 s: .*waited for rank 1 .pid "):
            phalanx.collective.allreduce(np.ones(2), group_name="pair", timeout=0.5)
        with pytest.raises(ValueError, match="src_rank must be between 0 and 1"):
            phalanx.collective.broadcast(np.ones(2), src_rank=2, group_name="pair")
        read_only = np.ones(2)
        read_only.setflags(write=False)
        with pytest.raises(ValueError, match="read-only"):
            phalanx.collective.allreduce(read_only, group_name="pair")
    finally:
        phalanx.collective.destroy_group("pair")
        phalanx.kill(member)
