"""GPU objects (python/phalanx/_private/gpu_objects.py) without a GPU: a
value's CUDA tensors kept on its producer's GPU, each reader's way by its
place, and the lifetimes, with a stand-in device (fake_gpu_device.py: CPU
tensors play CUDA ones, "GPU memory" is shared files, an IPC handle a file
name) and the real raylet, store and freeing messages. The same paths on a
GPU: tests/python/test_gpu.py and bench/gpu/device_figures.py."""
import ctypes
import os
import shutil
import subprocess
import threading
import time

import cloudpickle
import pytest

import phalanx
from phalanx import _core
from phalanx._private import gpu_objects, tensors
from phalanx._private.gpu_objects import Place, way

torch = pytest.importorskip("torch", reason="torch is not installed (pip install '.[test]' installs it)")

import fake_gpu_device  # noqa: E402 (after torch: it imports torch)
from conftest import wait_until  # noqa: E402

cloudpickle.register_pickle_by_value(fake_gpu_device)  # (the actors below install it in their processes)

MIB = 1 << 20


def _kept_for(producer, seconds=1.0):
    """Whether `producer` still keeps a GPU object after `seconds` (an observation window: nothing should free it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if phalanx.get(producer.kept.remote(), timeout=30) == 0:
            return False
        threading.Event().wait(0.05)
    return True


def _frees(producer, what):
    wait_until(lambda: phalanx.get(producer.kept.remote(), timeout=30) == 0, what=what)


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """This process (the driver) on a stand-in GPU "FAKE-GPU-0"; yields the device and the folder."""
    folder = str(tmp_path)
    monkeypatch.setattr(tensors, "on_gpu", lambda t: True)
    device = fake_gpu_device.SharedMemoryDevice(folder)
    gpu_objects.reset(device)
    yield device, folder
    gpu_objects.reset()


@phalanx.remote
class Producer:
    """An actor on a stand-in GPU that makes GPU objects."""

    def __init__(self, folder, uuid="FAKE-GPU-0"):
        self.device = fake_gpu_device.install(folder, uuid)

    def make(self, n, seed):
        return torch.arange(n, dtype=torch.float32) + seed

    def state_dict(self):
        return {"w": torch.full((512, 512), 2.0), "b": torch.arange(300_000, dtype=torch.float32), "step": 7}

    def kept(self):
        return gpu_objects.holder().num_kept()

    @phalanx.method(num_returns="streaming")
    def stream(self, n):
        for k in range(n):
            yield torch.full((MIB,), float(k))

    def allocated(self):
        return self.device.allocated

    def pid(self):
        return os.getpid()


@phalanx.remote
class Reader:
    """An actor on a stand-in GPU that reads GPU objects and may hold what it read."""

    def __init__(self, folder, uuid="FAKE-GPU-0"):
        self.device = fake_gpu_device.install(folder, uuid)
        self.held = None

    def read_and_hold(self, refs):
        self.held = phalanx.get(refs[0], timeout=30)
        return float(self.held.double().sum()), self.device.opened, self.device.copies

    def drop(self):
        self.held = None
        return gpu_objects.mappings().num_open()


@phalanx.remote
class AsyncReader:
    def __init__(self, folder):
        self.device = fake_gpu_device.install(folder)

    async def read(self, refs):
        t = await refs[0]
        return float(t.double().sum()), self.device.opened


@phalanx.remote
def checksum(t):
    return str(t.dtype), tuple(t.shape), float(t.double().sum())


def test_a_descriptor_round_trips_and_zeros_name_nothing():
    place = Place(b"o" * 20, b"n" * 16, 4242, "GPU-1234-abcd", b"h" * 64, 512, 4 * MIB)
    buf = gpu_objects.encode(place)
    assert len(buf) == gpu_objects.DESCRIPTOR_BYTES
    assert gpu_objects.decode(buf) == place
    assert gpu_objects.decode(gpu_objects.encode(None)) is None
    assert gpu_objects.decode(b"\1" * 256) is None


def test_the_way_a_reader_takes_depends_on_its_place():
    p = Place(b"o" * 20, b"N" * 16, 100, "GPU-A", b"h" * 64, 0, MIB)
    assert way(p, b"N" * 16, 100, "GPU-A", ["GPU-A"]) == "own"
    assert way(p, b"N" * 16, 100, None, ["GPU-A"]) == "staged"      # the producer wants it on the host
    assert way(p, b"N" * 16, 100, "GPU-B", ["GPU-A", "GPU-B"]) == "peer"
    assert way(p, b"N" * 16, 200, "GPU-A", ["GPU-A"]) == "map"      # same GPU, another process
    assert way(p, b"N" * 16, 200, "GPU-B", ["GPU-B"]) == "peer"     # another GPU of the node
    assert way(p, b"N" * 16, 200, None, []) == "staged"             # a CPU-only process
    assert way(p, b"M" * 16, 200, "GPU-A", ["GPU-A"]) == "staged"   # another node
    assert way(p._replace(handle=bytes(64)), b"N" * 16, 200, "GPU-A", ["GPU-A"]) == "staged"  # not shareable


def test_the_producer_reads_its_own_gpu_copy_and_frees_it_with_the_last_ref(cluster, fake_gpu):
    device, _ = fake_gpu
    t = torch.arange(MIB, dtype=torch.float32)  # 4 MiB
    ref = phalanx.put(t)
    holder = gpu_objects.holder()
    assert holder.num_kept() == 1 and device.allocated == 1
    pack = holder.pack(ref.binary())
    got = phalanx.get(ref, timeout=30)
    assert torch.equal(got, t)
    assert got.data_ptr() == pack.data_ptr(), "the producer's own read is its GPU copy, not the store's bytes"
    private = phalanx.get(ref, timeout=30, copy=True)
    assert torch.equal(private, t) and private.data_ptr() != pack.data_ptr()
    host = phalanx.get(ref, timeout=30, device="cpu")
    base, size = _core.store_region()
    assert torch.equal(host, t) and not (pack.data_ptr() <= host.data_ptr() < pack.data_ptr() + 4 * MIB)
    # The snapshot was taken at the put: writing the producer's tensor later changes nothing.
    t.add_(1)
    assert float(phalanx.get(ref, timeout=30, copy=True)[0]) == 0.0
    del ref, got, private, host, pack
    wait_until(lambda: holder.num_kept() == 0, what="the raylet's free to reach the holder")


def test_small_values_are_only_staged(cluster, fake_gpu):
    ref = phalanx.put(torch.ones(1000))
    assert gpu_objects.holder().num_kept() == 0
    assert torch.equal(phalanx.get(ref, timeout=30), torch.ones(1000))


def test_another_process_on_the_same_gpu_maps_it_and_keeps_it_alive_while_mapped(cluster, fake_gpu):
    device, folder = fake_gpu
    producer = Producer.remote(folder)
    ref = producer.make.remote(2 * MIB, 3)
    got = phalanx.get(ref, timeout=30)
    assert device.opened == 1 and device.copies == 0, "mapped: no copy"
    assert torch.equal(got, torch.arange(2 * MIB, dtype=torch.float32) + 3)
    base, size = _core.store_region()
    assert not (base <= got.data_ptr() < base + size), "the producer's memory, not the store's bytes"
    assert phalanx.get(producer.kept.remote(), timeout=30) == 1
    del ref  # the mapping still holds the object
    view = got[10:20]  # (a view of it: the mapping lives while any view does)
    del got
    assert _kept_for(producer), "a reader's mapping keeps the object"
    assert float(view[0]) == 13.0
    del view
    _frees(producer, "the producer to free once the mapping went")
    assert gpu_objects.mappings().num_open() == 0 and device.closed == 1
    phalanx.kill(producer)


def test_another_gpu_of_the_node_gets_a_private_copy(cluster, fake_gpu):
    _, folder = fake_gpu
    producer = Producer.remote(folder, "FAKE-GPU-0")
    reader = Reader.remote(folder, "FAKE-GPU-1")
    ref = producer.make.remote(MIB, 1)
    total, opened, copies = phalanx.get(reader.read_and_hold.remote([ref]), timeout=30)
    assert total == float((torch.arange(MIB, dtype=torch.float64) + 1).sum())
    assert opened == 1 and copies == 1
    assert phalanx.get(reader.drop.remote(), timeout=30) == 0, "the mapping was closed after the copy"
    phalanx.kill(producer)
    phalanx.kill(reader)


def test_a_readers_death_releases_its_mapping(cluster, fake_gpu):
    _, folder = fake_gpu
    producer = Producer.remote(folder)
    reader = Reader.remote(folder)
    ref = producer.make.remote(MIB, 0)
    total, opened, copies = phalanx.get(reader.read_and_hold.remote([ref]), timeout=30)
    assert opened == 1 and copies == 0
    del ref
    assert _kept_for(producer), "the reader's mapping keeps the object"
    phalanx.kill(reader)
    _frees(producer, "the producer to free once the reader died")
    phalanx.kill(producer)


def test_a_state_dict_is_one_allocation(cluster, fake_gpu):
    device, folder = fake_gpu
    producer = Producer.remote(folder)
    sd = phalanx.get(producer.state_dict.remote(), timeout=30)
    assert phalanx.get(producer.allocated.remote(), timeout=30) == 1
    assert device.opened == 1, "one handle for every tensor of the value"
    assert torch.equal(sd["w"], torch.full((512, 512), 2.0)) and sd["step"] == 7
    assert torch.equal(sd["b"], torch.arange(300_000, dtype=torch.float32))
    phalanx.kill(producer)


def test_a_cpu_only_reader_and_a_dead_producers_readers_read_the_staged_bytes(cluster, fake_gpu):
    device, folder = fake_gpu
    producer = Producer.remote(folder)
    ref = producer.make.remote(MIB, 5)
    want = torch.arange(MIB, dtype=torch.float32) + 5
    # A task's worker has no GPU (no device installed there): the store's bytes.
    assert phalanx.get(checksum.remote(ref), timeout=30) == ("torch.float32", (MIB,), float(want.double().sum()))
    pid = phalanx.get(producer.pid.remote(), timeout=30)
    phalanx.kill(producer)
    wait_until(lambda: not _alive(pid), what="the producer to exit")
    got = phalanx.get(ref, timeout=30)
    assert torch.equal(got, want) and device.opened == 0, "the producer is gone: the staged bytes, no hang"


def test_an_async_actor_awaits_a_gpu_ref(cluster, fake_gpu):
    _, folder = fake_gpu
    producer = Producer.remote(folder)
    reader = AsyncReader.remote(folder)
    ref = producer.make.remote(MIB, 2)
    total, opened = phalanx.get(reader.read.remote([ref]), timeout=30)
    assert total == float((torch.arange(MIB, dtype=torch.float64) + 2).sum()) and opened == 1
    phalanx.kill(producer)
    phalanx.kill(reader)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_raylets_reduces_of_gpu_objects_are_right_and_their_results_read_as_stored(cluster, fake_gpu):
    device, _ = fake_gpu
    xs = [torch.full((MIB,), float(k + 1)) for k in range(3)]
    refs = [phalanx.put(x) for x in xs]
    assert gpu_objects.holder().num_kept() == 3
    out = phalanx.get(phalanx.collective.reduce(refs, timeout=30, device="cpu"), timeout=30)  # (the raylet's)
    assert torch.equal(out, torch.full((MIB,), 6.0))
    packs = [gpu_objects.holder().pack(r.binary()) for r in refs]
    assert all(not (p.data_ptr() <= out.data_ptr() < p.data_ptr() + 4 * MIB) for p in packs), \
        "the result is its own bytes, not an input's GPU copy"
    for each in phalanx.get(phalanx.collective.allreduce(refs, timeout=30), timeout=30):
        assert torch.equal(each, torch.full((MIB,), 6.0))


def test_a_reduce_of_ready_gpu_objects_runs_on_this_gpu_and_gives_a_gpu_object(cluster, fake_gpu):
    xs = [torch.full((MIB,), float(k + 1)) for k in range(3)]
    refs = [phalanx.put(x) for x in xs]
    for op, want in (("sum", 6.0), ("prod", 6.0), ("min", 1.0), ("max", 3.0)):
        out_ref = phalanx.collective.reduce(refs, op=op, timeout=30)
        out = phalanx.get(out_ref, timeout=30)
        assert torch.equal(out, torch.full((MIB,), want)), op
        pack = gpu_objects.holder().pack(out_ref.binary())
        assert pack is not None and out.data_ptr() == pack.data_ptr(), "the result is a GPU object of this process"
        assert phalanx.collective.reduced_inputs(out_ref, timeout=30) == refs


@phalanx.remote
class Maker:
    def __init__(self, folder):
        fake_gpu_device.install(folder)
        self.release = threading.Event()

    def grad(self, value):
        return torch.full((MIB // 2,), float(value))

    def fail(self):
        raise RuntimeError("this simulator diverged")

    def late(self):
        self.release.wait(60)
        return torch.zeros(MIB // 2)

    def other_shape(self):
        return torch.zeros(MIB)


def test_a_gpu_reduce_of_futures_takes_them_as_they_come(cluster, fake_gpu):
    device, folder = fake_gpu
    makers = [Maker.remote(folder) for _ in range(3)]
    refs = [m.grad.remote(k + 1) for k, m in enumerate(makers)]
    out = phalanx.collective.reduce(refs, device="cuda", timeout=60)
    assert torch.equal(phalanx.get(out, timeout=60), torch.full((MIB // 2,), 6.0))
    assert device.opened == 3, "each producer's GPU object mapped, not copied"
    # The first two of three, one of them never ready; a failed input skipped while enough remain.
    some = phalanx.collective.reduce([makers[0].grad.remote(1), makers[1].fail.remote(), makers[2].late.remote(),
                                      makers[1].grad.remote(2)], num_objects=2, device="cuda", timeout=60)
    assert torch.equal(phalanx.get(some, timeout=60), torch.full((MIB // 2,), 3.0))
    assert len(phalanx.collective.reduced_inputs(some, timeout=30)) == 2
    for m in makers:
        phalanx.kill(m)


def test_a_gpu_reduce_says_what_went_wrong(cluster, fake_gpu):
    _, folder = fake_gpu
    a, b = Maker.remote(folder), Maker.remote(folder)
    bad = phalanx.collective.reduce([a.grad.remote(1), b.other_shape.remote()], device="cuda", timeout=60)
    with pytest.raises(phalanx.exceptions.CollectiveError, match=r"do not match: input 0 .* input 1"):
        phalanx.get(bad, timeout=60)
    failing = phalanx.collective.reduce([a.fail.remote(), b.grad.remote(1)], device="cuda", timeout=60)
    with pytest.raises(phalanx.exceptions.CollectiveError, match="too many reduce inputs failed: 1 of 2, and 2 were wanted; input 0 .*: RuntimeError: this simulator diverged"):
        phalanx.get(failing, timeout=60)
    late = phalanx.collective.reduce([a.grad.remote(1), b.late.remote()], device="cuda", timeout=1)
    with pytest.raises(phalanx.exceptions.GetTimeoutError, match="1 inputs missing.*input 1"):
        phalanx.get(late, timeout=60)
    phalanx.kill(a)
    phalanx.kill(b)


FAKE_LIBCUDA = r"""
#include <stdint.h>
#include <string.h>
typedef struct { char reserved[64]; } CUipcMemHandle;
static int pushed = 0, inited = 0;
static uint64_t closed = 0;
static unsigned last_flags = 99;
int cuInit(unsigned f) { inited = 1; return 0; }
int cuDeviceGet(int* d, int ordinal) { if (!inited) return 3; *d = ordinal + 100; return 0; }
int cuDevicePrimaryCtxRetain(void** ctx, int dev) { *ctx = (void*)(uintptr_t)(0x1000 + dev); return 0; }
int cuCtxPushCurrent_v2(void* ctx) { if ((uintptr_t)ctx != 0x1000 + 100) return 201; pushed++; return 0; }
int cuCtxPopCurrent_v2(void** ctx) { pushed--; return 0; }
int cuMemGetAddressRange_v2(uint64_t* base, size_t* size, uint64_t ptr) {
  *base = ptr & ~(uint64_t)0xFFF; *size = 1 << 20; return 0;
}
/* Zeros first: a reading that stops at the first zero byte would lose the rest. */
int cuIpcGetMemHandle(CUipcMemHandle* h, uint64_t base) {
  memset(h, 0, 64); memcpy(h->reserved + 8, &base, 8); h->reserved[63] = 0x5a; return 0;
}
int cuIpcOpenMemHandle_v2(uint64_t* ptr, CUipcMemHandle h, unsigned flags) {
  if (h.reserved[63] != 0x5a) return 400;
  memcpy(ptr, h.reserved + 8, 8); last_flags = flags; return 0;
}
int cuIpcCloseMemHandle(uint64_t ptr) { closed = ptr; return 0; }
int fake_pushed(void) { return pushed; }
uint64_t fake_closed(void) { return closed; }
unsigned fake_flags(void) { return last_flags; }
"""


class _Where:
    index = 0


class _FakeCudaTensor:
    device = _Where()

    def data_ptr(self):
        return 0x7F0000001234


def test_the_cuda_driver_passes_handles_and_contexts_whole(tmp_path):
    """CudaDriver's ctypes calls against a stand-in libcuda (built by the test): 64-byte handles with
    zero bytes in them survive, the handle goes by value, peer access is asked, contexts are balanced."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcuda (scripts/setup.sh installs build-essential)")
    (tmp_path / "fake_cuda.c").write_text(FAKE_LIBCUDA)
    lib_path = str(tmp_path / "libfakecuda.so")
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib_path, str(tmp_path / "fake_cuda.c")], check=True)
    driver = gpu_objects.CudaDriver(torch, library=lib_path)
    lib = ctypes.CDLL(lib_path)
    lib.fake_closed.restype = ctypes.c_uint64
    handle, offset = driver.handle(_FakeCudaTensor())
    assert len(handle) == 64 and handle[:8] == bytes(8) and handle[63] == 0x5A
    assert offset == 0x234
    mapping = driver.open(handle, 0)
    assert mapping._address == 0x7F0000001000 and lib.fake_flags() == 1
    mapping.close()
    assert lib.fake_closed() == 0x7F0000001000 and lib.fake_pushed() == 0
    with pytest.raises(RuntimeError, match="cuIpcOpenMemHandle failed: CUDA driver error 400"):
        driver.open(bytes(64), 0)
    assert lib.fake_pushed() == 0


def test_a_generators_items_are_gpu_objects_too(cluster, fake_gpu):
    device, folder = fake_gpu
    producer = Producer.remote(folder)
    refs = list(producer.stream.remote(2))
    items = [phalanx.get(r, timeout=30) for r in refs]
    assert [float(t[0]) for t in items] == [0.0, 1.0] and device.opened == 2
    assert phalanx.get(producer.kept.remote(), timeout=30) == 2
    del refs, items
    _frees(producer, "the producer to free its items' GPU copies")
    phalanx.kill(producer)
