"""A GPU stand-in for GPU objects' tests (phalanx/_private/gpu_objects.py's
DeviceApi), so their ways and lifetimes run in CI without a GPU: CPU tensors
play CUDA ones (tensors.on_gpu patched), a process's "GPU memory" is files in
a folder shared by the test's processes, mapped with mmap, and an IPC handle
is a file's name. As with CUDA, a handle of a process that has exited cannot
be opened. `install(folder, uuid)` makes it the device of the calling process."""
import itertools
import mmap
import os
import weakref

import numpy as np
import torch

from phalanx._private import gpu_objects, tensors

_names = itertools.count()


class _Kept(np.ndarray):
    """An array that holds `keep` as long as it (and a tensor made of it) lives."""
    keep = None


class SharedMemoryDevice(gpu_objects.DeviceApi):
    def __init__(self, folder, uuids=("FAKE-GPU-0",), current=0):
        self.folder, self._uuids, self._current = folder, list(uuids), current
        self._allocations = {}  # base address -> (file name, bytes)
        self.allocated = 0      # allocations made
        self.opened = 0         # handles opened
        self.closed = 0         # mappings closed
        self.copies = 0         # private copies made (copy_to)

    def uuids(self):
        return list(self._uuids)

    def current(self):
        return self._current

    def index_of(self, tensor):
        return self._current

    def allocate(self, nbytes, index):
        name = f"{os.getpid()}-{next(_names)}"
        path = os.path.join(self.folder, name)
        with open(path, "wb+") as f:
            f.truncate(nbytes)
            mem = mmap.mmap(f.fileno(), nbytes)
        tensor = torch.from_numpy(np.frombuffer(mem, dtype=np.uint8))
        self._allocations[tensor.data_ptr()] = (name, nbytes)
        weakref.finalize(tensor, os.unlink, path)
        self.allocated += 1
        return tensor

    def handle(self, tensor):
        address = tensor.data_ptr()
        for base, (name, nbytes) in self._allocations.items():
            if base <= address < base + nbytes:
                return name.encode().ljust(64, b"\0"), address - base
        return None

    def open(self, handle, index):
        name = handle.rstrip(b"\0").decode()
        pid = int(name.partition("-")[0])
        os.kill(pid, 0)  # ProcessLookupError once the producer has exited, as CUDA refuses its handles
        with open(os.path.join(self.folder, name), "r+b") as f:
            mem = mmap.mmap(f.fileno(), 0)
        self.opened += 1
        return _Mapping(self, mem)

    def copy_to(self, tensor, index):
        self.copies += 1
        return tensor.clone()


class _Mapping:
    def __init__(self, device, mem):
        self._device, self._mem = device, mem

    def tensor(self, offset, nbytes, keep):
        arr = np.frombuffer(self._mem, dtype=np.uint8, count=nbytes, offset=offset).view(_Kept)
        arr.keep = keep
        return torch.from_numpy(arr)

    def close(self):
        self._device.closed += 1  # (the mmap goes with its last array)


def install(folder, uuid="FAKE-GPU-0"):
    """Makes a SharedMemoryDevice on GPU `uuid` this process's device, with CPU tensors playing CUDA ones."""
    device = SharedMemoryDevice(folder, uuids=(uuid,))
    gpu_objects.reset(device)
    tensors.on_gpu = lambda t: True
    return device
