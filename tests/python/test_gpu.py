"""The GPU paths from Python: `get(ref, device=...)`, CUDA tensors as values
(staged through the host store), GPU scheduling, and static groups with
backend="nccl". The parts that need no GPU (device choice on CPU tensors,
the errors a CPU-only process gives) run everywhere; the others skip where
torch sees no CUDA device, saying so, and run on a GPU machine
(scripts/device_test.sh)."""
import numpy as np
import pytest

import phalanx

torch = pytest.importorskip("torch", reason="torch is not installed (pip install '.[test]' installs it)")

HAS_CUDA = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="torch sees no CUDA device on this machine")
cpu_only = pytest.mark.skipif(HAS_CUDA, reason="checks what a process without a CUDA device says")


def test_get_on_the_cpu_gives_tensors_there_and_leaves_other_values(cluster):
    state = {"w": torch.randn(64, 32), "b": torch.zeros(32, dtype=torch.bfloat16), "step": 7,
             "arr": np.arange(4), "nested": [torch.ones(3), (torch.arange(2), "x")]}
    back = phalanx.get(phalanx.put(state), device="cpu")
    assert back["w"].device.type == "cpu" and torch.equal(back["w"], state["w"])
    assert back["b"].dtype == torch.bfloat16
    assert back["step"] == 7 and isinstance(back["arr"], np.ndarray)
    assert torch.equal(back["nested"][1][0], torch.arange(2)) and back["nested"][1][1] == "x"
    refs = [phalanx.put(torch.full((2,), float(k))) for k in range(3)]
    assert [float(t[0]) for t in phalanx.get(refs, device="cpu")] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cuda:-1", "tpu:0", ""])
def test_a_device_that_is_not_one_is_refused_before_anything_waits(cluster, bad):
    ref = phalanx.put(torch.ones(2))
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda' or 'cuda:N'"):
        phalanx.get(ref, device=bad)


@cpu_only
def test_a_cuda_device_this_process_lacks_is_named(cluster):
    ref = phalanx.put(torch.ones(2))
    with pytest.raises(ValueError, match=r"get\(device='cuda:0'\): this process has no CUDA device"):
        phalanx.get(ref, device="cuda:0")


@cpu_only
def test_nccl_groups_say_what_is_missing(cluster):
    with pytest.raises(RuntimeError, match="backend='nccl' needs a CUDA device in this process"):
        phalanx.collective.init_group(1, 0, "nccl-here", backend="nccl", timeout=10)
    with pytest.raises(ValueError, match="backend must be one of object, nccl"):
        phalanx.collective.init_group(1, 0, "bogus", backend="mpi", timeout=10)
    # Nothing was formed: the name is free for a group of the object layer.
    phalanx.collective.init_group(1, 0, "nccl-here", timeout=10)
    a = np.ones(4)
    phalanx.collective.allreduce(a, group_name="nccl-here", timeout=10)
    phalanx.collective.destroy_group("nccl-here")


def test_object_layer_groups_refuse_cuda_tensors_naming_nccl(cluster):
    phalanx.collective.init_group(1, 0, "cpu-group", timeout=10)
    try:
        fake = torch.ones(2, device="meta")  # any non-CPU tensor
        with pytest.raises(ValueError, match="backend='nccl' takes CUDA tensors"):
            phalanx.collective.allreduce(fake, group_name="cpu-group", timeout=10)
    finally:
        phalanx.collective.destroy_group("cpu-group")


# ---- on a GPU ----

@phalanx.remote(num_gpus=1)
class GpuActor:
    def make(self, n):
        import torch as th
        return th.arange(n, dtype=th.float32, device="cuda") * 2

    def where(self, t):
        return str(t.device), float(t.sum())


@needs_gpu
def test_a_cuda_tensor_comes_back_on_the_gpu_or_where_asked(cluster_gpu):
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    ref = phalanx.put(t)
    back = phalanx.get(ref)
    assert back.device.type == "cuda" and torch.equal(back, t)
    host = phalanx.get(ref, device="cpu")
    assert host.device.type == "cpu" and torch.equal(host, t.cpu())
    a = GpuActor.remote()
    made = a.make.remote(1000)
    assert phalanx.get(made, timeout=60).device.type == "cuda"
    device, total = phalanx.get(a.where.remote(made), timeout=60)
    assert device.startswith("cuda") and total == float(sum(range(1000)) * 2)


@needs_gpu
def test_a_cuda_tensor_goes_into_the_store_pages_registered_with_cuda_once(cluster_gpu):
    from phalanx._private import tensors
    t = torch.randn(16 << 20, device="cuda")  # 64 MiB
    first = phalanx.put(t)
    reg = tensors.registration()
    assert reg.refused is None, f"cudaHostRegister refused the store's pages: error {reg.refused}"
    segments = set(reg._done)
    assert segments, "the put registered the store's pages it wrote"
    del first
    again = phalanx.put(t)  # the same pages again: nothing to register
    assert torch.equal(phalanx.get(again), t) and set(reg._done) >= segments
    host = phalanx.get(again, device="cpu")
    assert torch.equal(host, t.cpu())


@phalanx.remote(num_gpus=0.5)
class Half:
    def gpus(self):
        return phalanx.get_gpu_ids()


@needs_gpu
def test_two_half_gpu_actors_share_it_and_a_third_waits(cluster_gpu):
    a, b = Half.remote(), Half.remote()
    assert phalanx.get([a.gpus.remote(), b.gpus.remote()], timeout=60) == [[0], [0]]
    c = Half.remote()
    ready, _ = phalanx.wait([c.gpus.remote()], timeout=3)
    assert not ready, "a third half-GPU actor should wait for the GPU"
    phalanx.kill(a)
    assert phalanx.get(c.gpus.remote(), timeout=60) == [0]


@needs_gpu
def test_nccl_group_of_one_rank(cluster_gpu):
    pytest.importorskip("nvidia.nccl", reason="the nvidia-nccl-cu13 wheel is not installed")
    phalanx.collective.init_group(1, 0, "nccl1", backend="nccl", timeout=30)
    try:
        t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
        phalanx.collective.allreduce(t, group_name="nccl1", timeout=30)
        assert torch.equal(t, torch.arange(1 << 20, dtype=torch.float32, device="cuda"))
        phalanx.collective.broadcast(t, src_rank=0, group_name="nccl1", timeout=30)
        out = [torch.zeros_like(t)]
        phalanx.collective.allgather(out, t, group_name="nccl1", timeout=30)
        assert torch.equal(out[0], t)
        with pytest.raises(ValueError, match="takes CUDA tensors"):
            phalanx.collective.allreduce(torch.ones(2), group_name="nccl1", timeout=30)
    finally:
        phalanx.collective.destroy_group("nccl1")


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2,
                    reason="NCCL refuses two ranks on one GPU: multi-rank NCCL needs two GPUs")
def test_nccl_group_of_two_ranks(cluster_gpu):
    @phalanx.remote(num_gpus=1)
    class Rank:
        def __init__(self, r):
            phalanx.collective.init_group(2, r, "nccl2", backend="nccl", timeout=60)
            self.r = r

        def run(self):
            import torch as th
            t = th.full((1 << 20,), float(self.r + 1), device="cuda")
            phalanx.collective.allreduce(t, group_name="nccl2", timeout=60)
            return float(t[0])

    ranks = [Rank.remote(r) for r in range(2)]
    assert phalanx.get([r.run.remote() for r in ranks], timeout=120) == [3.0, 3.0]


# ---- GPU objects on a GPU (phalanx/_private/gpu_objects.py; without a GPU: test_gpu_objects.py) ----

@phalanx.remote(num_gpus=0.5)
class HalfMaker:
    def make(self, n, value):
        import torch as th
        return th.full((n,), value, dtype=th.float32, device="cuda")

    def kept(self):
        from phalanx._private import gpu_objects
        return gpu_objects.holder().num_kept()


@needs_gpu
def test_a_gpu_object_is_mapped_by_another_process_on_the_gpu_and_freed_after(cluster_gpu):
    from conftest import wait_until
    from phalanx import _core
    from phalanx._private import gpu_objects
    p = HalfMaker.remote()
    ref = p.make.remote(16 << 20, 3.0)  # 64 MiB
    t = phalanx.get(ref, timeout=60)
    assert t.device.type == "cuda" and bool((t == 3.0).all())
    assert gpu_objects.mappings().num_open() == 1, f"not mapped: {gpu_objects.last_error}"
    base, size = _core.store_region()
    assert not (base <= t.data_ptr() < base + size)
    assert phalanx.get(p.kept.remote(), timeout=60) == 1
    mine = phalanx.get(ref, timeout=60, copy=True)
    assert mine.data_ptr() != t.data_ptr() and torch.equal(mine, t)
    host = phalanx.get(ref, timeout=60, device="cpu")
    assert host.device.type == "cpu" and bool((host == 3.0).all())
    del ref, t, mine, host
    wait_until(lambda: phalanx.get(p.kept.remote(), timeout=60) == 0, what="the producer to free its GPU copy")
    assert gpu_objects.mappings().num_open() == 0
    phalanx.kill(p)


@needs_gpu
def test_a_reduce_of_gpu_objects_runs_on_the_gpu(cluster_gpu):
    a, b = HalfMaker.remote(), HalfMaker.remote()
    refs = [(a if k % 2 else b).make.remote(1 << 20, float(k + 1)) for k in range(4)]
    total = phalanx.get(phalanx.collective.reduce(refs, device="cuda", timeout=60), timeout=60)
    assert total.device.type == "cuda" and bool((total == 10.0).all())
    phalanx.wait(refs, num_returns=4, timeout=60)
    again = phalanx.get(phalanx.collective.reduce(refs, op="max", timeout=60), timeout=60)  # (ready GPU objects)
    assert again.device.type == "cuda" and bool((again == 4.0).all())
    phalanx.kill(a)
    phalanx.kill(b)
