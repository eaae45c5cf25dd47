"""GPU objects: the CUDA tensors of a value kept on the GPU of the process
that made them, behind its ref (docs/gpu.md, "GPU objects").

What a put or a return of a value with CUDA tensors does, in a process with
a GPU (serialization.serialize, given the object's id): the tensors' bytes
are staged into the store as before (one copy from the GPU straight into the
store's registered pages: tensors.DevicePiece), so every reader anywhere can
read them, and the process also keeps them on its GPU: every CUDA tensor of
the value copied into one flat allocation (a state_dict is one allocation,
one IPC handle), a snapshot taken at the put. The stored value carries a
small descriptor (Place: node, pid, the GPU's UUID, the allocation's legacy
CUDA IPC handle, plain bytes, and the pack's offset in it). The producer
tells its raylet it keeps the object (_core.device_held, before storing it);
when the node frees the object (no reference is left anywhere) the raylet
says so (scheduler/device_holders.h) and the Holder's thread lets the
memory go, so an idle actor frees too.

A reader takes the fastest way its place allows (way(), a pure function):
the producer itself gets views of its own pack; a process on the same GPU
maps the allocation (CUDA IPC: O(1) in size, the mapping keeps a ref to the
object, so the producer frees only after the last reader lets go); a
process on another GPU of the node maps it with peer access and copies it
onto its own GPU (one device-to-device copy); another node, a CPU-only
process, `get(ref, device="cpu")`, or a producer gone or unreachable read
the staged bytes. Nothing for the user to declare.

Semantics: a tensor read by mapping is the producer's memory. Objects are
immutable by convention: a reader that writes in place changes what every
reader on that GPU sees (not the staged bytes). `get(ref, copy=True)` gives
private copies. A producer that dies loses nothing: readers read the staged
bytes.

The device is an interface (DeviceApi): CudaDriver on a GPU (the CUDA driver
API through ctypes: libcuda.so.1 is on every GPU machine, and its legacy IPC
handles need no descriptor passing, where torch's own sharing needs
pidfd_getfd for expandable segments); tests give a stand-in whose "GPU
memory" is shared memory (tests/python/fake_gpu_device.py).

torch is never imported here: this module is used only once a value holds a
torch tensor, so torch is already loaded."""
import contextlib
import ctypes
import os
import struct
import sys
import threading
import typing

from phalanx import _core
from phalanx._private import state

# Below this many bytes of CUDA tensors (or up to the inline threshold) a
# value is only staged: mapping costs more than the copy.
MIN_BYTES = 1 << 20
# Each tensor's bytes start at a multiple of this in the pack.
ALIGN = 256
DESCRIPTOR_BYTES = 256
_MAGIC = 0x4A424F47  # "GOBJ"
_LAYOUT = struct.Struct("<II20s16sI48s64sQQ")  # magic, version, object, node, pid, GPU UUID, IPC handle, offset, bytes
ENV_SWITCH = "PHALANX_GPU_OBJECTS"  # "0": CUDA tensors are only staged (the behaviour before GPU objects)


class Place(typing.NamedTuple):
    """Where a GPU object's pack lives: its producer's node and process, the
    GPU (UUID), the allocation's IPC handle and the pack's offset and size in it."""
    object_id: bytes
    node_id: bytes
    pid: int
    uuid: str
    handle: bytes
    offset: int
    nbytes: int


def encode(place):
    """The descriptor's DESCRIPTOR_BYTES bytes (all zero: not kept on a GPU)."""
    if place is None:
        return bytes(DESCRIPTOR_BYTES)
    body = _LAYOUT.pack(_MAGIC, 1, place.object_id, place.node_id, place.pid, place.uuid.encode()[:48],
                        place.handle, place.offset, place.nbytes)
    return body.ljust(DESCRIPTOR_BYTES, b"\0")


def decode(buf):
    """The Place a descriptor names, or None (not kept on a GPU, or not a descriptor)."""
    if len(buf) < _LAYOUT.size:
        return None
    magic, version, oid, node, pid, uuid, handle, offset, nbytes = _LAYOUT.unpack_from(buf, 0)
    if magic != _MAGIC or version != 1:
        return None
    return Place(oid, node, pid, uuid.rstrip(b"\0").decode(), handle, offset, nbytes)


def way(place, node_id, pid, target_uuid, node_uuids):
    """How a reader reads a GPU object: "own" (the producer itself), "map"
    (same GPU, another process: CUDA IPC), "peer" (another GPU of the node:
    map with peer access, copy onto the target) or "staged" (the store's
    bytes). `target_uuid`: the GPU the reader wants it on (None: the host);
    `node_uuids`: the GPUs this process can address."""
    if node_id != place.node_id:
        return "staged"
    if pid == place.pid:
        return "own" if target_uuid == place.uuid else "staged" if target_uuid is None else "peer"
    if target_uuid is None or not any(place.handle):
        return "staged"
    if target_uuid == place.uuid:
        return "map"
    return "peer" if node_uuids else "staged"


class DeviceApi:
    """What GPU objects ask of the device (CudaDriver; a stand-in in tests)."""

    def uuids(self):
        """The UUIDs of the GPUs this process sees, by index."""
        raise NotImplementedError

    def current(self):
        """The index of this thread's current GPU."""
        raise NotImplementedError

    def index_of(self, tensor):
        """The index of the GPU `tensor` is on."""
        raise NotImplementedError

    def allocate(self, nbytes, index):
        """A new uint8 tensor of `nbytes` on GPU `index`."""
        raise NotImplementedError

    def handle(self, tensor):
        """(IPC handle bytes, offset of `tensor` in the allocation), or None when it cannot be shared."""
        raise NotImplementedError

    def open(self, handle, index):
        """Maps another process's allocation onto GPU `index`: an object with
        tensor(offset, nbytes, keep) (a uint8 tensor over those bytes whose
        storage holds `keep` until torch frees it) and close()."""
        raise NotImplementedError

    def copy_to(self, tensor, index):
        """A private copy of `tensor` on GPU `index`."""
        raise NotImplementedError


class _Mapped:
    """Another process's GPU memory as torch takes it (__cuda_array_interface__);
    `keep` is held as long as the tensor made of it lives."""

    def __init__(self, address, nbytes, keep):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}
        self.keep = keep


class _CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class CudaDriver(DeviceApi):
    """The device through the CUDA driver API (libcuda.so.1, by ctypes) and torch."""

    def __init__(self, torch, library="libcuda.so.1"):
        self._torch = torch
        self._cu = cu = ctypes.CDLL(library)
        ptr, u64 = ctypes.POINTER, ctypes.c_uint64
        for name, args in (("cuInit", [ctypes.c_uint]),
                           ("cuDeviceGet", [ptr(ctypes.c_int), ctypes.c_int]),
                           ("cuDevicePrimaryCtxRetain", [ptr(ctypes.c_void_p), ctypes.c_int]),
                           ("cuCtxPushCurrent_v2", [ctypes.c_void_p]),
                           ("cuCtxPopCurrent_v2", [ptr(ctypes.c_void_p)]),
                           ("cuMemGetAddressRange_v2", [ptr(u64), ptr(ctypes.c_size_t), u64]),
                           ("cuIpcGetMemHandle", [ptr(_CUipcMemHandle), u64]),
                           ("cuIpcOpenMemHandle_v2", [ptr(u64), _CUipcMemHandle, ctypes.c_uint]),
                           ("cuIpcCloseMemHandle", [u64])):
            fn = getattr(cu, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        self._check(cu.cuInit(0), "cuInit")  # (torch may not have touched CUDA yet in this process)
        self._contexts = {}
        self._uuids = None

    def _check(self, err, what):
        if err != 0:
            raise RuntimeError(f"{what} failed: CUDA driver error {err}")

    def _push(self, index):
        ctx = self._contexts.get(index)
        if ctx is None:
            dev, ctx = ctypes.c_int(), ctypes.c_void_p()
            self._check(self._cu.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
            self._check(self._cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
            self._contexts[index] = ctx
        self._check(self._cu.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")

    def _pop(self):
        self._cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def uuids(self):
        if self._uuids is None:  # (fixed for the process: CUDA_VISIBLE_DEVICES is read once)
            cuda = self._torch.cuda
            self._uuids = [str(cuda.get_device_properties(i).uuid) for i in range(cuda.device_count())]
        return self._uuids

    def current(self):
        return self._torch.cuda.current_device()

    def index_of(self, tensor):
        return tensor.device.index

    def allocate(self, nbytes, index):
        return self._torch.empty(nbytes, dtype=self._torch.uint8, device=self._torch.device("cuda", index))

    def handle(self, tensor):
        ptr = ctypes.c_uint64(tensor.data_ptr())
        base, size, h = ctypes.c_uint64(), ctypes.c_size_t(), _CUipcMemHandle()
        self._push(tensor.device.index)
        try:
            if self._cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr.value) != 0:
                return None
            if self._cu.cuIpcGetMemHandle(ctypes.byref(h), base.value) != 0:
                return None  # (expandable segments, or IPC not allowed here)
        finally:
            self._pop()
        return bytes(h), ptr.value - base.value  # (all 64 bytes: h.reserved would stop at the first zero)

    def open(self, handle, index):
        h, ptr = _CUipcMemHandle(), ctypes.c_uint64()
        ctypes.memmove(ctypes.addressof(h), bytes(handle)[:64].ljust(64, b"\0"), 64)
        self._push(index)
        try:
            # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (1): another GPU of the node maps it too.
            self._check(self._cu.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, 1), "cuIpcOpenMemHandle")
        finally:
            self._pop()
        return _CudaMapping(self, ptr.value, index)

    def close(self, address, index):
        self._push(index)
        try:
            self._cu.cuIpcCloseMemHandle(address)
        finally:
            self._pop()

    def copy_to(self, tensor, index):
        return tensor.to(self._torch.device("cuda", index), copy=True)


class _CudaMapping:
    """An allocation of another process's, mapped here (CudaDriver.open)."""

    def __init__(self, driver, address, index):
        self._driver, self._address, self._index = driver, address, index

    def tensor(self, offset, nbytes, keep):
        torch = self._driver._torch
        return torch.as_tensor(_Mapped(self._address + offset, nbytes, keep),
                               device=torch.device("cuda", self._index))

    def close(self):
        self._driver.close(self._address, self._index)


_api = None
_api_tried = False


def use_device(api):
    """Makes `api` this process's device for GPU objects (tests give a stand-in); None: none."""
    global _api, _api_tried
    _api, _api_tried = api, True


def device():
    """This process's DeviceApi, or None (no GPU, no torch, no libcuda, or GPU objects switched off)."""
    global _api, _api_tried, last_error
    if not _api_tried:
        torch = sys.modules.get("torch")
        if torch is None:
            return None  # (asked again once torch is loaded)
        _api_tried = True
        if os.environ.get(ENV_SWITCH, "1") != "0" and torch.cuda.is_available():
            try:
                _api = CudaDriver(torch)
            except Exception as e:  # noqa: BLE001 - no libcuda.so.1, or its cuInit failed: only staged
                last_error = f"GPU objects are off in this process: {type(e).__name__}: {e}"
                _api = None
    return _api


class Holder:
    """The producer's side: the packs this process keeps on its GPU, by
    object id, until the raylet frees them (a thread waits for that)."""

    def __init__(self, api):
        self._api = api
        self._lock = threading.Lock()
        self._packs = {}  # object id -> uint8 pack on the GPU
        self._stop = threading.Event()
        self._thread = None

    def keep(self, object_id, flats, offsets, nbytes):
        """Packs `flats` (uint8 tensors on a GPU) at `offsets` into one allocation
        of `nbytes`, keeps it for `object_id` and says so to the raylet: its
        Place, or None when it cannot be shared (no IPC handle)."""
        index = self._api.index_of(flats[0])
        pack = self._api.allocate(nbytes, index)
        for flat, off in zip(flats, offsets):
            if flat.numel():
                pack[off:off + flat.numel()].copy_(flat)
        shared = self._api.handle(pack)
        if shared is None:
            return None
        handle, offset = shared
        _core.device_held([object_id])  # (before the object is stored: its free cannot come first)
        with self._lock:
            self._packs[object_id] = pack
            if self._thread is None:
                self._thread = threading.Thread(target=self._free_loop, name="phalanx-gpu-objects", daemon=True)
                self._thread.start()
        return Place(object_id, state.info.get("node_id", b""), os.getpid(), self._api.uuids()[index],
                     handle, offset, nbytes)

    def pack(self, object_id):
        with self._lock:
            return self._packs.get(object_id)

    def drop(self, object_id):
        """Lets the pack go (a put that failed after keep)."""
        with self._lock:
            self._packs.pop(object_id, None)

    def num_kept(self):
        with self._lock:
            return len(self._packs)

    def _free_loop(self):
        while not self._stop.is_set():
            if not _core.is_connected():
                self._stop.wait(0.2)
                continue
            for object_id in _core.freed_device_objects(500):
                self.drop(object_id)

    def close(self):
        """Stops the thread and lets every pack go (shutdown)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            self._packs.clear()


class Mappings:
    """The reader's side: other processes' allocations mapped here, each
    opened once per GPU and closed when the last tensor over it goes."""

    def __init__(self, api):
        self._api = api
        self._lock = threading.Lock()
        self._open = {}  # (pid, handle, index) -> [mapping, users]

    def tensor(self, place, offset, nbytes, index, keep):
        """A uint8 view of the pack's bytes [offset, offset + nbytes) mapped on GPU
        `index`; `keep` (the object's ref) lives as long as the view."""
        key = (place.pid, place.handle, index)
        with self._lock:
            entry = self._open.get(key)
            if entry is None:
                entry = self._open[key] = [self._api.open(place.handle, index), 0]
            entry[1] += 1
        lease = _Lease(self, key, keep)
        try:
            return entry[0].tensor(place.offset + offset, nbytes, lease)
        except BaseException:
            lease.release()
            raise

    def release(self, key):
        with self._lock:
            entry = self._open.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del self._open[key]
        entry[0].close()

    def num_open(self):
        with self._lock:
            return len(self._open)


class _Lease:
    """One view's use of a mapping, held by the view's storage: released (with
    the object's ref) when torch frees the storage, whatever views of it were made."""

    def __init__(self, mappings, key, keep):
        self._mappings, self._key, self.keep = mappings, key, keep
        self._done = False

    def release(self):
        if not self._done:
            self._done = True
            self._mappings.release(self._key)
            self.keep = None

    def __del__(self):
        self.release()


# ---- writing: the CUDA tensors of a value being pickled (serialization.serialize) ----

class DescriptorPiece:
    """The descriptor as an out-of-band buffer of the value: its size is
    known while pickling, its bytes once the pack is kept (the C++ writer has
    it copy itself in, as a tensors.DevicePiece)."""

    nbytes = DESCRIPTOR_BYTES

    def __init__(self):
        self.place = None

    def copy_into(self, view):
        view[:DESCRIPTOR_BYTES] = encode(self.place)


class _Slot:
    """Stands for the descriptor in each CUDA tensor's pickle; pickle memoizes
    it, so a value's tensors share one descriptor buffer."""

    def __init__(self, piece, buffer):
        self.piece, self.buffer = piece, buffer

    def __reduce__(self):
        return place_of, (self.buffer,)


def place_of(buf):
    """The Place a stored value's descriptor `buf` names, or None (unpickling
    calls it too). Only the object it names is read from the GPU: bytes made
    of it under another id (a reduce's result, an allreduce's copies) are
    read as stored."""
    view = memoryview(buf)
    if view.nbytes != DESCRIPTOR_BYTES:
        return None
    place = decode(view)
    if place is None or getattr(view.obj, "object_id", None) != place.object_id:
        return None
    return place


class Collector:
    """The CUDA tensors of one value being pickled for object `object_id`:
    where each goes in the pack, and the descriptor they share."""

    def __init__(self, object_id, make_buffer):
        self.object_id = object_id
        self.flats, self.offsets, self.nbytes = [], [], 0
        self.piece = DescriptorPiece()
        self._make_buffer = make_buffer
        self.slot = None  # (made with the first CUDA tensor: a value without any has no descriptor)

    def add(self, flat):
        """(the descriptor's slot, the tensor's offset in the pack) for a uint8 flat CUDA tensor."""
        if self.slot is None:
            self.slot = _Slot(self.piece, self._make_buffer(self.piece))
        offset = (self.nbytes + ALIGN - 1) // ALIGN * ALIGN
        self.flats.append(flat)
        self.offsets.append(offset)
        self.nbytes = offset + flat.numel()
        return self.slot, offset

    def finish(self):
        """Keeps the pack on the GPU if the value is worth it (its descriptor
        then names it); else the value is only staged. Returns the Place or None."""
        if not self.flats or self.nbytes <= max(MIN_BYTES, state.info.get("inline_threshold", 0)):
            return None
        try:
            self.piece.place = holder().keep(self.object_id, self.flats, self.offsets, self.nbytes)
        except Exception as e:  # noqa: BLE001 - out of GPU memory, say: readers read the staged bytes
            global last_error
            last_error = f"{type(e).__name__}: {e}"
            self.piece.place = None
        return self.piece.place


_local = threading.local()
last_error = None  # why the last GPU object could not be kept or read on a GPU (readers then read the staged bytes)


def collector_for(object_id, make_buffer):
    """A Collector for the value of object `object_id` being pickled, or None
    when this process keeps no GPU objects (no GPU, or switched off)."""
    return Collector(object_id, make_buffer) if device() is not None else None


# ---- reading ----

@contextlib.contextmanager
def reading(target=None, copy=False):
    """While values are read on this thread: the device they are wanted on
    (tensors.parse_device's form; None: this process's current GPU, if any)
    and whether the reader wants private copies."""
    prev = getattr(_local, "device", None), getattr(_local, "copy", False)
    _local.device, _local.copy = target, copy
    try:
        yield
    finally:
        _local.device, _local.copy = prev


def _target(api):
    """(index, UUID) of the GPU this thread reads onto, or (None, None) for the host."""
    wanted = getattr(_local, "device", None)
    if api is None or wanted == "cpu":
        return None, None
    index = api.current() if wanted in (None, "cuda") else int(wanted.partition(":")[2])
    uuids = api.uuids()
    return (index, uuids[index]) if 0 <= index < len(uuids) else (None, None)


def read(place, offset, nbytes):
    """A uint8 tensor of bytes [offset, offset + nbytes) of the object's pack,
    the fastest way this reader's place allows, or None: read the staged
    bytes (another node, the host wanted, the producer gone)."""
    global last_error
    api = device()
    index, uuid = _target(api)
    how = way(place, state.info.get("node_id", b""), os.getpid(), uuid, api.uuids() if api else [])
    copy = getattr(_local, "copy", False)
    try:
        if how == "own" or (how == "peer" and place.pid == os.getpid()):
            pack = holder().pack(place.object_id)
            if pack is None:
                return None
            view = pack[offset:offset + nbytes]
            return api.copy_to(view, index) if copy or how == "peer" else view
        if how == "map":
            view = mappings().tensor(place, offset, nbytes, index, _core.ObjectRef(place.object_id))
            return api.copy_to(view, index) if copy else view
        if how == "peer":
            return api.copy_to(mappings().tensor(place, offset, nbytes, index, None), index)
    except Exception as e:  # noqa: BLE001 - the producer exited, or its GPU is out of reach: the staged bytes
        last_error = f"{type(e).__name__}: {e}"
    return None


_parts = {}  # Holder / Mappings -> this process's one, made on first use
_parts_lock = threading.Lock()


def _part(kind):
    with _parts_lock:
        part = _parts.get(kind)
        if part is None:
            part = _parts[kind] = kind(device())
        return part


def holder():
    """This process's Holder (made on its first GPU object)."""
    return _part(Holder)


def mappings():
    """This process's Mappings (made on its first mapped read)."""
    return _part(Mappings)


def shutdown():
    """Lets every kept pack go and stops the Holder's thread (api.shutdown)."""
    with _parts_lock:
        h = _parts.pop(Holder, None)
    if h is not None:
        h.close()


def reset(api=None):
    """Starts this process's GPU objects afresh on `api` (tests give a
    stand-in; None: found again from torch on the next use)."""
    global _api, _api_tried
    shutdown()
    with _parts_lock:
        _parts.clear()
    _api, _api_tried = api, api is not None


def drop(object_id):
    """Lets the GPU copy of `object_id` go, if this process kept one (a put that failed)."""
    with _parts_lock:
        h = _parts.get(Holder)
    if h is not None:
        h.drop(object_id)
