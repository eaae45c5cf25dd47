"""A CUDA tensor's way into the store (python/phalanx/_private/tensors.py),
checked here without a GPU: its bytes go as a DevicePiece that the C++
writer has copy itself straight into the object's bytes (one copy, no host
tensor between), and the store's pages a GPU copy touches are registered
with CUDA once per segment (StoreRegistration, against a fake cudart). CPU
tensors stand in for CUDA ones (tensors.on_gpu patched); the same paths on
a GPU: tests/python/test_gpu.py and bench/gpu/device_figures.py."""
import numpy as np
import pytest

import phalanx
from phalanx import _core
from phalanx._private import tensors

torch = pytest.importorskip("torch", reason="torch is not installed (pip install '.[test]' installs it)")


@pytest.fixture
def as_if_on_gpu(monkeypatch):
    """Every tensor's bytes go as a DevicePiece; records each copy_into's (address, bytes)."""
    copies = []
    real = tensors.DevicePiece.copy_into

    def recording(self, view):
        copies.append((np.frombuffer(view, dtype=np.uint8).ctypes.data if len(view) else 0, len(view)))
        return real(self, view)
    monkeypatch.setattr(tensors, "on_gpu", lambda t: True)
    monkeypatch.setattr(tensors.DevicePiece, "copy_into", recording)
    return copies


@phalanx.remote
def checksum(t):
    return str(t.dtype), tuple(t.shape), float(t.double().sum())


def test_a_gpu_tensors_bytes_are_copied_once_straight_into_the_store(cluster, as_if_on_gpu):
    t = torch.arange(1 << 20, dtype=torch.float32).view(1024, 1024)  # 4 MiB: a store object
    ref = phalanx.put(t)
    (address, nbytes), = as_if_on_gpu
    base, size = _core.store_region()
    assert nbytes == t.numel() * 4
    assert base <= address and address + nbytes <= base + size, "written in the store's pages, not a host copy"
    assert torch.equal(phalanx.get(ref, timeout=30), t)
    # A task on another process reads the same bytes; a small one goes inline the same way.
    assert phalanx.get(checksum.remote(ref), timeout=30) == ("torch.float32", (1024, 1024), float(t.double().sum()))
    small = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    assert torch.equal(phalanx.get(phalanx.put(small), timeout=30), small)
    assert as_if_on_gpu[-1][1] == 4


def test_state_dicts_of_gpu_tensors_and_empty_ones_round_trip(cluster, as_if_on_gpu):
    sd = {"w": torch.randn(256, 256), "b": torch.zeros(0), "step": torch.tensor(7)}
    got = phalanx.get(phalanx.put(sd), timeout=30)
    assert set(got) == set(sd) and all(torch.equal(got[k], sd[k]) for k in sd)
    assert len(as_if_on_gpu) == 3


def test_a_copy_that_fails_fails_the_put_and_leaves_no_object(cluster, monkeypatch):
    def broken(self, view):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setattr(tensors, "on_gpu", lambda t: True)
    monkeypatch.setattr(tensors.DevicePiece, "copy_into", broken)
    before = phalanx.cluster_stats()["store_objects"]
    with pytest.raises(RuntimeError, match="illegal memory access"):
        phalanx.put(torch.ones(1 << 20))
    # (<=: objects of earlier tests may still be going away; a half-written one left would add one)
    assert phalanx.cluster_stats()["store_objects"] <= before, "the half-written object was aborted"
    assert not tensors._pending_pieces
    monkeypatch.undo()
    assert torch.equal(phalanx.get(phalanx.put(torch.ones(1 << 20)), timeout=30), torch.ones(1 << 20))


class FakeCudart:
    def __init__(self, refuse=0):
        self.registered, self.unregistered, self.refuse = [], [], refuse

    def cudaHostRegister(self, ptr, size, flags):
        if self.refuse:
            return self.refuse
        self.registered.append((ptr, size))
        return 0

    def cudaHostUnregister(self, ptr):
        self.unregistered.append(ptr)
        return 0


def test_the_store_is_registered_by_segment_once_each_and_only_the_store():
    region = [(1 << 40, 10 * 4096)]
    cudart = FakeCudart()
    reg = tensors.StoreRegistration(cudart, region=lambda: region[0], segment=4 * 4096)
    base = 1 << 40
    assert reg.cover(base + 100, 10) == 1                      # segment 0
    assert reg.cover(base + 4 * 4096 - 5, 10) == 1             # spans 0 and 1: only 1 is new
    assert reg.cover(base, 10 * 4096) == 1                      # the last, shorter segment
    assert reg.cover(base, 10 * 4096) == 0                      # nothing twice
    assert cudart.registered == [(base, 4 * 4096), (base + 4 * 4096, 4 * 4096), (base + 8 * 4096, 2 * 4096)]
    assert reg.cover(base - 4096, 10) == 0 and reg.cover(base + 10 * 4096, 1) == 0  # outside: an inline value
    region[0] = (2 << 40, 4096)  # a new cluster, a new mapping: the old segments are let go first
    assert reg.cover(2 << 40, 1) == 1
    assert cudart.unregistered == [base, base + 4 * 4096, base + 8 * 4096]
    reg.release()
    assert cudart.unregistered[-1] == 2 << 40


def test_a_registration_cuda_refuses_is_not_tried_again():
    cudart = FakeCudart(refuse=2)  # cudaErrorMemoryAllocation (a memlock limit)
    reg = tensors.StoreRegistration(cudart, region=lambda: (4096, 1 << 20), segment=1 << 16)
    assert reg.cover(4096, 10) == 0 and reg.refused == 2
    cudart.refuse = 0
    assert reg.cover(4096, 10) == 0 and not cudart.registered, "copies go on at pageable rates"
