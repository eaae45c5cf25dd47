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
copied to the store once (device to host) and the header records its device;
`get` in a process that has a CUDA device puts it on that process's current
device (one host-to-device copy), and in a CPU-only process leaves it on the
CPU. `get(ref, device="cpu" | "cuda" | "cuda:N")` chooses
(to_device). (GPU tensors kept on their GPU, read through CUDA IPC, are not
built yet: docs/gpu.md.)

torch is never imported here: this module is used only once a value's type
is torch.Tensor, so torch is already loaded. Tensors this path does not take
(sparse, quantized) keep torch's own pickling, which copies the data. As
with torch's pickling, a tensor that requires grad arrives as a leaf that
requires grad (autograd does not cross processes)."""
import os
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
    return (tensor.device.type in ("cpu", "cuda") and tensor.layout is sys.modules["torch"].strided
            and not tensor.is_quantized)


def dtype_code(tensor):
    """The header's element-type code for a tensor this module stores (0: not reducible)."""
    return DTYPE_CODES.get(dtype_name(tensor), 0) if takes(tensor) else 0


def reduce_tensor(tensor):
    """The pickle reduction of `tensor`, or NotImplemented for torch's own."""
    if not takes(tensor):
        return NotImplemented
    data = tensor.detach()
    device = None
    if data.device.type == "cuda":  # staged through the host: one copy to the store
        device = str(data.device)
        data = data.to("cpu")
    if data.is_conj():
        data = data.resolve_conj()
    if data.is_neg():
        data = data.resolve_neg()
    flat = data.contiguous().reshape(-1).view(sys.modules["torch"].uint8).numpy()
    args = (pickle.PickleBuffer(flat), dtype_name(tensor), tuple(tensor.shape), tensor.requires_grad)
    return _rebuild, args + ((device,) if device else ())


def _rebuild(buf, dtype, shape, requires_grad, device=None):
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
    if device is not None and torch.cuda.is_available():
        # Made on a GPU: onto this process's own (its index there need not be ours).
        tensor = tensor.to(torch.device("cuda", torch.cuda.current_device()))
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


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
