"""torch tensors as values, without pickling their data.

A CPU tensor (any dtype, strided) is pickled as its shape, dtype and one
out-of-band buffer of its bytes, so it goes into the store with one copy, as
a numpy array does, and raylets reduce it without Python when its dtype is a
numeric one (the header carries the dtype code, bfloat16 included).

`get` gives back a tensor over the stored bytes. torch has no read-only
tensors, so a shared view would let an in-place op (`add_`, an optimizer
step) change the object under every reader on the node. A large tensor is
therefore a private copy-on-write mapping of the object's pages (reads share
the store's memory; a write copies only the pages it touches, in this
process); a small one, or one that came inline, is copied.

A CUDA tensor goes the same way, staged through the host: its bytes are
copied once, from the GPU straight into the store (a DevicePiece: the C++
writer has it copy itself into the object's bytes), and the header records
its device; `get` in a process that has a CUDA device puts it on that
process's current device (one host-to-device copy from the store's shared
pages), and in a CPU-only process leaves it on the CPU. The store's pages a
GPU copy touches are page-locked for CUDA (cudaHostRegister) in 256 MiB
segments, each once per process (StoreRegistration), so both copies run at
the rate of pinned memory; registering is never done per object.
`get(ref, device="cpu" | "cuda" | "cuda:N")` chooses (to_device). A value
put or returned by a GPU process is also kept on its GPU, and readers that
can reach that GPU map it instead (gpu_objects.py).

torch is never imported here: this module is used only once a value's type
is torch.Tensor, so torch is already loaded. Tensors this path does not take
(sparse, quantized) keep torch's own pickling, which copies the data. As
with torch's pickling, a tensor that requires grad arrives as a leaf that
requires grad (autograd does not cross processes)."""
import os
import pickle
import sys
import warnings

import numpy as np

from phalanx import _core
from phalanx._private import gpu_objects

# Below this many bytes a tensor from `get` is a copy: cheaper than a mapping
# and its page faults.
PRIVATE_MAPPING_MIN_BYTES = 256 << 10

# Header codes of the dtypes a raylet reduces (collectives::DType + 1).
DTYPE_CODES = {name: i + 1 for i, name in enumerate(
    ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "bfloat16"])}


# The store's mapping is page-locked for CUDA in segments of this size, each
# the first time a GPU copy touches it (registering costs ~1-2 GB/s: once).
REGISTER_SEGMENT_BYTES = 256 << 20


class StoreRegistration:
    """Which segments of this process's store mapping are registered with CUDA
    (cudaHostRegister), so copies between them and a GPU are DMA at pinned
    rates. `cudart` is torch.cuda.cudart() (tests give a fake); `region` is
    _core.store_region. A registration CUDA refuses (a container's memlock
    limit) is not tried again: copies then run at pageable rates."""

    def __init__(self, cudart, region=_core.store_region, segment=REGISTER_SEGMENT_BYTES):
        self._cudart, self._region, self._segment = cudart, region, segment
        self._base = self._size = 0
        self._done = set()  # segment indexes registered
        self.refused = None  # CUDA's error code once a registration failed

    def cover(self, address, nbytes):
        """Registers the segments of [address, address + nbytes) that lie in
        the store (bytes elsewhere, an inline value's, are left alone).
        Returns how many segments this call registered."""
        base, size = self._region()
        if (base, size) != (self._base, self._size):
            self.release()
            self._base, self._size = base, size
        if self.refused is not None or not size or address < base or address + nbytes > base + size:
            return 0
        made = 0
        for k in range((address - base) // self._segment, (address + nbytes - 1 - base) // self._segment + 1):
            if k in self._done:
                continue
            start = base + k * self._segment
            err = self._cudart.cudaHostRegister(start, min(self._segment, base + size - start), 0)
            if int(err) != 0:
                self.refused = int(err)
                return made
            self._done.add(k)
            made += 1
        return made

    def release(self):
        """Unregisters every segment (before the store is unmapped: shutdown)."""
        for k in sorted(self._done):
            self._cudart.cudaHostUnregister(self._base + k * self._segment)
        self._done.clear()
        self._base = self._size = 0


_registration = None


def registration():
    """This process's StoreRegistration (made on the first GPU copy; torch is loaded by then)."""
    global _registration
    if _registration is None:
        _registration = StoreRegistration(sys.modules["torch"].cuda.cudart())
    return _registration


def release_registration():
    """Before the store's mapping goes (api.shutdown)."""
    if _registration is not None:
        _registration.release()


class DevicePiece:
    """A CUDA tensor's bytes as an out-of-band buffer of a value: the C++
    writer (python/bindings/serialization.cc) has it copy itself into the
    object's bytes, so the bytes go from the GPU straight into the store."""

    def __init__(self, flat):
        self.flat = flat  # uint8, contiguous, on the GPU
        self.nbytes = flat.numel()

    def copy_into(self, view):
        if not self.nbytes:
            return
        torch = sys.modules["torch"]
        dst = torch.frombuffer(view, dtype=torch.uint8)
        if self.flat.device.type == "cuda":
            registration().cover(dst.data_ptr(), self.nbytes)
        dst.copy_(self.flat)


# Out-of-band placeholders of DevicePieces being pickled: id(placeholder) -> piece (see buffer_for).
_pending_pieces = {}


def placeholder_for(piece):
    """An out-of-band buffer for pickle that stands for `piece` (an object with
    nbytes and copy_into(view)): buffer_for gives the piece for it."""
    placeholder = bytearray(1)
    _pending_pieces[id(placeholder)] = (placeholder, piece)
    return pickle.PickleBuffer(placeholder)


def buffer_for(pickle_buffer):
    """What serialize stores for an out-of-band buffer: the DevicePiece a
    placeholder stands for, or the buffer itself."""
    if _pending_pieces:
        piece = _pending_pieces.pop(id(pickle_buffer.raw().obj), None)
        if piece is not None:
            return piece[1]
    return pickle_buffer


def dtype_name(tensor):
    return str(tensor.dtype).rpartition(".")[2]


def takes(tensor):
    """Whether this module stores `tensor`'s data out of band."""
    return (tensor.device.type in ("cpu", "cuda") and tensor.layout is sys.modules["torch"].strided
            and not tensor.is_quantized)


def dtype_code(tensor):
    """The header's element-type code for a tensor this module stores (0: not reducible)."""
    return DTYPE_CODES.get(dtype_name(tensor), 0) if takes(tensor) else 0


def reduce_tensor(tensor, collector=None):
    """The pickle reduction of `tensor`, or NotImplemented for torch's own.
    `collector`: the gpu_objects.Collector of the value, when it is to be a GPU object."""
    if not takes(tensor):
        return NotImplemented
    data = tensor.detach()
    if data.is_conj():
        data = data.resolve_conj()
    if data.is_neg():
        data = data.resolve_neg()
    flat = data.contiguous().reshape(-1).view(sys.modules["torch"].uint8)
    if not on_gpu(data):
        return _rebuild, (pickle.PickleBuffer(flat.numpy()), dtype_name(tensor), tuple(tensor.shape),
                          tensor.requires_grad)
    # Staged through the host: copied once, from the GPU into the store; and
    # kept on the GPU too when this value is a GPU object (gpu_objects).
    device = str(data.device) if data.device.type == "cuda" else None
    args = (placeholder_for(DevicePiece(flat)), dtype_name(tensor), tuple(tensor.shape), tensor.requires_grad,
            device)
    return _rebuild, (args + collector.add(flat) if collector is not None else args)


def on_gpu(tensor):
    """Whether `tensor`'s bytes go as a DevicePiece (its device is a GPU; tests stand CPU tensors in)."""
    return tensor.device.type == "cuda"


def _rebuild(buf, dtype, shape, requires_grad, device=None, place=None, offset=0):
    import torch
    view = memoryview(buf)
    if place is not None:  # a GPU object: mapped or copied from its producer's GPU when this reader can
        flat = gpu_objects.read(place, offset, view.nbytes)
        if flat is not None:
            return _shaped(flat, dtype, shape, requires_grad, torch)
    if device is not None and torch.cuda.is_available():
        # Made on a GPU: onto this process's own (its index there need not be ours), one
        # host-to-device copy from the store's shared pages (page-locked: a DMA).
        return _onto_gpu(view, dtype, shape, requires_grad, torch)
    mapping = _core.private_mapping(view) if view.nbytes >= PRIVATE_MAPPING_MIN_BYTES else None
    if mapping is not None:
        flat = torch.frombuffer(mapping, dtype=torch.uint8)
    else:
        flat = torch.empty(view.nbytes, dtype=torch.uint8)
        if view.nbytes:
            flat.numpy()[:] = np.frombuffer(view, dtype=np.uint8)
    return _shaped(flat, dtype, shape, requires_grad, torch)


def _shaped(flat, dtype, shape, requires_grad, torch):
    """The tensor of `dtype` and `shape` over the bytes `flat`."""
    tensor = flat.view(getattr(torch, dtype)).view(shape)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _onto_gpu(view, dtype, shape, requires_grad, torch):
    target = torch.device("cuda", torch.cuda.current_device())
    if not view.nbytes:
        flat = torch.empty(0, dtype=torch.uint8, device=target)
    else:
        host = np.frombuffer(view, dtype=np.uint8)  # (read-only: only read from, by the copy)
        registration().cover(host.ctypes.data, host.nbytes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's "not writable" warning: nothing writes it
            flat = torch.from_numpy(host).to(target)
    return _shaped(flat, dtype, shape, requires_grad, torch)


def parse_device(device):
    """`device` as get() takes it: None, "cpu", "cuda" or "cuda:N" (or a
    torch.device); its normal form, or ValueError saying what is accepted."""
    if device is None:
        return None
    text = str(device).strip().lower()
    if text == "cpu" or text == "cuda":
        return text
    kind, _, index = text.partition(":")
    if kind == "cuda" and index.isdigit():
        return f"cuda:{int(index)}"
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def to_device(value, device):
    """`value` with every torch tensor in it (in lists, tuples and dicts) on
    `device` (parse_device's form). Other values are left as they are. A
    CUDA device this process does not have is a ValueError naming it."""
    torch = sys.modules.get("torch")
    if device.startswith("cuda"):
        if torch is None:
            raise ValueError(f"get(device={device!r}): torch is not imported in this process, so there are no "
                             f"CUDA tensors to give")
        if not torch.cuda.is_available():
            raise ValueError(f"get(device={device!r}): this process has no CUDA device "
                             f"(torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES="
                             f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
        index = torch.cuda.current_device() if device == "cuda" else int(device.partition(":")[2])
        if index >= torch.cuda.device_count():
            raise ValueError(f"get(device={device!r}): this process sees {torch.cuda.device_count()} CUDA "
                             f"device(s) (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
        target = torch.device("cuda", index)
    else:
        if torch is None:
            return value
        target = torch.device("cpu")
    return _move(value, target, torch)


def _move(value, target, torch):
    if isinstance(value, torch.Tensor):
        return value if value.device == target else value.to(target)
    if isinstance(value, list):
        return [_move(v, target, torch) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_move(v, target, torch) for v in value)
    if isinstance(value, dict):  # a state_dict is an OrderedDict: keep the type where it can be made so
        moved = [(k, _move(v, target, torch)) for k, v in value.items()]
        try:
            return type(value)(moved)
        except TypeError:
            return dict(moved)
    return value
