"""torch tensors as values (python/phalanx/_private/tensors.py): CPU tensors
go into the store without pickling their data and come back from `get` as
tensors over the stored bytes, private to the reader (copy-on-write); the
collectives take them wherever they take numpy arrays, bfloat16 included.
Skipped where torch is not installed (it is in the `test` extra)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import phalanx
from conftest import loopback_nodes

torch = pytest.importorskip("torch", reason="torch is not installed (pip install '.[test]' installs it)")

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.complex64]


def _mapping_of(address):
    """The /proc/self/maps path of the mapping holding `address` ('' for anonymous memory)."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return parts[5] if len(parts) > 5 else ""
    return None


@phalanx.remote
def double(t):
    return t * 2


@phalanx.remote
def describe(t):
    return str(t.dtype), tuple(t.shape), t.requires_grad, float(t.detach().double().sum())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips(cluster, dtype):
    for shape in [(3, 4), (), (0, 5), (1 << 17,)]:
        t = (torch.arange(int(np.prod(shape)) if shape else 1) % 7).reshape(shape).to(dtype)
        back = phalanx.get(phalanx.put(t))
        assert type(back) is torch.Tensor and back.dtype == dtype and back.shape == t.shape
        assert torch.equal(back, t)


def test_a_large_tensor_is_the_store_object_and_writes_stay_private(cluster):
    t = torch.randn(1 << 20)  # 4 MiB
    ref = phalanx.put(t)
    a = phalanx.get(ref)
    assert "memfd" in _mapping_of(a.data_ptr()), "the tensor should map the store, not a copy"
    a += 1  # an in-place op: this process's pages only
    a.mul_(3)
    b = phalanx.get(ref)
    assert torch.equal(b, t), "an in-place op on one reader's tensor changed the stored object"
    assert torch.equal(phalanx.get(double.remote(ref)), t * 2), "another process sees the object unchanged"
    assert torch.allclose(a, (t + 1) * 3)


def test_tensors_travel_through_tasks_and_keep_their_kind(cluster):
    w = torch.randn(300, 200, requires_grad=True)
    assert phalanx.get(describe.remote(w)) == ("torch.float32", (300, 200), True,
                                               pytest.approx(float(w.detach().sum()), rel=1e-4))
    state = {"layer.weight": torch.randn(64, 32), "layer.bias": torch.zeros(64, dtype=torch.bfloat16),
             "step": torch.tensor(7)}
    back = phalanx.get(phalanx.put(state))
    assert list(back) == list(state) and all(torch.equal(back[k], state[k]) for k in state)
    p = torch.nn.Parameter(torch.ones(5))
    q = phalanx.get(phalanx.put(p))
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad and torch.equal(q.detach(), p.detach())
    nc = torch.randn(60, 50).t()  # not contiguous: stored contiguous
    assert not nc.is_contiguous() and torch.equal(phalanx.get(phalanx.put(nc)), nc)
    sparse = torch.randn(4, 4).to_sparse()  # torch's own pickling: copied, still equal
    assert torch.equal(phalanx.get(phalanx.put(sparse)).to_dense(), sparse.to_dense())
    big = torch.arange(1 << 20, dtype=torch.float64)
    assert torch.equal(phalanx.get(double.remote(big)), big * 2)


def test_a_non_leaf_tensor_arrives_as_a_leaf_as_with_torchs_pickle(cluster):
    x = torch.ones(1 << 17, requires_grad=True)
    y = x * 2  # a non-leaf: autograd does not cross processes
    back = phalanx.get(phalanx.put(y))
    assert back.requires_grad and back.is_leaf and torch.equal(back.detach(), y.detach())
    assert phalanx.get(describe.remote(y))[2] is True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.float64])
def test_reduce_of_tensors_matches_torch(cluster, dtype):
    inputs = [(torch.randn(1 << 18) * 4).to(dtype) for _ in range(4)]
    refs = [phalanx.put(t) for t in inputs]
    got = phalanx.get(phalanx.collective.reduce(refs, op="sum"))
    assert type(got) is torch.Tensor and got.dtype == dtype
    exact = torch.stack(inputs).double().sum(0)
    if dtype.is_floating_point:
        # the raylet adds in arrival order, rounding each partial sum to the
        # dtype: within a few of its ulps of the sum of magnitudes
        bound = 4 * torch.finfo(dtype).eps * torch.stack(inputs).double().abs().sum(0)
        assert bool(((got.double() - exact).abs() <= bound).all())
    else:
        assert torch.equal(got, exact.to(dtype))
    top = phalanx.get(phalanx.collective.reduce(refs, op="max"))
    assert torch.equal(top, torch.stack(inputs).max(0).values)
    outs = phalanx.get(phalanx.collective.allreduce(refs, op="min"))
    assert all(torch.equal(o, torch.stack(inputs).min(0).values) for o in outs)


def test_reduce_of_mismatched_tensors_names_the_inputs(cluster):
    a = phalanx.put(torch.ones(1 << 18))
    b = phalanx.put(torch.ones(1 << 18, dtype=torch.bfloat16))
    with pytest.raises(phalanx.exceptions.CollectiveError, match="bfloat16"):
        phalanx.get(phalanx.collective.reduce([a, b]), timeout=30)


@phalanx.remote
class Rank:
    def __init__(self, world, rank):
        import torch as th
        self.th, self.rank = th, rank
        phalanx.collective.init_group(world, rank, "tensors", timeout=60)

    def run(self):
        th, r = self.th, self.rank
        a = th.full((1 << 18,), float(r + 1), dtype=th.bfloat16, requires_grad=True)
        phalanx.collective.allreduce(a, op="sum", group_name="tensors", timeout=60)
        b = th.arange(1000, dtype=th.float64) if r == 1 else th.zeros(1000, dtype=th.float64)
        phalanx.collective.broadcast(b, src_rank=1, group_name="tensors", timeout=60)
        gathered = [th.zeros(10, dtype=th.int32) for _ in range(2)]
        phalanx.collective.allgather(gathered, th.full((10,), r * 10, dtype=th.int32), group_name="tensors",
                                     timeout=60)
        part = th.zeros(5)
        phalanx.collective.reducescatter(part, [th.full((5,), float(r + k)) for k in range(2)], op="max",
                                         group_name="tensors", timeout=60)
        return (str(a.dtype), float(a.detach().float().min()), float(a.detach().float().max()),
                bool(th.equal(b, th.arange(1000, dtype=th.float64))), [int(g[0]) for g in gathered],
                float(part.min()), float(part.max()))


def test_static_group_collectives_on_tensors_across_nodes():
    with loopback_nodes([{"n0": 1}, {"n1": 1}]):
        ranks = [Rank.options(resources={f"n{k}": 1}).remote(2, k) for k in range(2)]
        results = phalanx.get([r.run.remote() for r in ranks], timeout=120)
        for rank, (dtype, lo, hi, bcast, gathered, pmin, pmax) in enumerate(results):
            assert (dtype, lo, hi, bcast, gathered) == ("torch.bfloat16", 3.0, 3.0, True, [0, 10])
            # reducescatter: max over ranks of [r + k] is 1 + k; rank k keeps part k
            assert (pmin, pmax) == (1.0 + rank, 1.0 + rank)


def test_tensors_cross_nodes():
    with loopback_nodes([{"n0": 1}, {"n1": 1}]):
        t = torch.randn(1 << 20)
        remote = double.options(resources={"n1": 1})
        assert torch.equal(phalanx.get(remote.remote(t), timeout=60), t * 2)
        ref = phalanx.put(torch.ones(1 << 20, dtype=torch.bfloat16))
        assert phalanx.get(describe.options(resources={"n1": 1}).remote(ref), timeout=60)[:2] == (
            "torch.bfloat16", (1 << 20,))


def test_phalanx_does_not_import_torch_for_other_values(tmp_path):
    script = ("import sys, numpy as np, phalanx\n"
              "phalanx.init(num_cpus=1)\n"
              "assert phalanx.get(phalanx.put(np.ones(10))).sum() == 10\n"
              "print('torch' in sys.modules)\n"
              "phalanx.shutdown()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(phalanx.__file__))})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
