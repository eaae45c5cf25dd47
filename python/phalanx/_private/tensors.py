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

torch is never imported here: this module is used only once a value's type
is torch.Tensor, so torch is already loaded. Tensors this path does not take
(CUDA, sparse, quantized) keep torch's own pickling, which copies the
data. As with torch's pickling, a tensor that requires grad arrives as a
leaf that requires grad (autograd does not cross processes)."""
import pickle
import sys

import numpy as np

from phalanx import _core

# Below this many bytes a tensor from `get` is a copy: cheaper than a mapping
# and its page faults.
PRIVATE_MAPPING_MIN_BYTES = 256 << 10

# Header codes of the dtypes a raylet reduces (collectives::DType + 1).
DTYPE_CODES = {name: i + 1 for i, name in enumerate(
    ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "bfloat16"])}


def dtype_name(tensor):
    return str(tensor.dtype).rpartition(".")[2]


def takes(tensor):
    """Whether this module stores `tensor`'s data out of band."""
    return tensor.device.type == "cpu" and tensor.layout is sys.modules["torch"].strided and not tensor.is_quantized


def dtype_code(tensor):
    """The header's element-type code for a tensor this module stores (0: not reducible)."""
    return DTYPE_CODES.get(dtype_name(tensor), 0) if takes(tensor) else 0


def reduce_tensor(tensor):
    """The pickle reduction of `tensor`, or NotImplemented for torch's own."""
    if not takes(tensor):
        return NotImplemented
    data = tensor.detach()
    if data.is_conj():
        data = data.resolve_conj()
    if data.is_neg():
        data = data.resolve_neg()
    flat = data.contiguous().reshape(-1).view(sys.modules["torch"].uint8).numpy()
    return _rebuild, (pickle.PickleBuffer(flat), dtype_name(tensor), tuple(tensor.shape), tensor.requires_grad)


def _rebuild(buf, dtype, shape, requires_grad):
    import torch
    view = memoryview(buf)
    mapping = _core.private_mapping(view) if view.nbytes >= PRIVATE_MAPPING_MIN_BYTES else None
    if mapping is not None:
        flat = torch.frombuffer(mapping, dtype=torch.uint8)
    else:
        flat = torch.empty(view.nbytes, dtype=torch.uint8)
        if view.nbytes:
            flat.numpy()[:] = np.frombuffer(view, dtype=np.uint8)
    tensor = flat.view(getattr(torch, dtype)).view(shape)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor
