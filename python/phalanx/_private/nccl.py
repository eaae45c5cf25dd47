"""The NCCL backend of static groups: init_group(..., backend="nccl").

CUDA tensors are reduced, broadcast, gathered and sent in place by NCCL on
the GPUs, one communicator per group. The ranks meet through the same GCS
rendezvous as the object-layer groups (collective_group.py): rank 0 makes
the NCCL unique id and hands it to the others there, so a rank that never
comes is a GetTimeoutError naming it, as for any group.

Every call has a deadline: the operation is queued on the tensor's current
CUDA stream and this rank polls an event recorded after it, and NCCL's
asynchronous error, until the deadline. On a timeout or an NCCL error the
communicator is aborted (ncclCommAbort: the kernels stop, nothing hangs),
the call raises naming the group, the operation and the error, and the
group is broken: every later call raises at once, and the ranks form a new
group (destroy_group, init_group).

One libnccl per process. NCCL is loaded with ctypes; a process that
already has a libnccl mapped (torch's CUDA build loads its own at `import
torch`) uses that one, since two copies in one process do not share their
state. Otherwise, in this order: PHALANX_NCCL_LIBRARY, the nvidia-nccl-cu13
wheel (`pip install nvidia-nccl-cu13`), the library path. Without it, or
without a CUDA device in this process, init_group says which is missing.
NCCL refuses two ranks on one GPU: groups of more than one rank need a GPU
per rank.

The bootstrap network. NCCL's ranks meet over TCP, even a group of one: rank
0's unique id holds an address the others connect to, on an interface NCCL
picks itself unless NCCL_SOCKET_IFNAME names one, and it picks one by its
own rules (not loopback while another exists) that a container can defeat.
Unless the user set NCCL_SOCKET_IFNAME, phalanx sets it, before NCCL first
runs in the process, to the interface that holds this node's address in the
cluster: loopback for a cluster on one machine, the interface the other
nodes reach this one by otherwise. NCCL_DEBUG and every other NCCL_ variable
pass from the environment the raylet was started in to its workers. An
init that fails names the library's path, NCCL's version and the interface."""
import ctypes
import ctypes.util
import fcntl
import glob
import os
import socket
import struct
import sys
import time
import warnings

from phalanx.exceptions import CollectiveError, GetTimeoutError
from phalanx._private import state
from phalanx._private.rpc_tables import all_nodes

_IN_PROGRESS = 7
_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6, "float32": 7,
           "float64": 8, "bfloat16": 9}
_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
_lib = None
_lib_path = None
_interface = None  # (name, why) once chosen


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def loaded_in_process(maps="/proc/self/maps"):
    """The path of a libnccl already mapped into this process (torch's), or None."""
    try:
        with open(maps) as f:
            for line in f:
                path = line.rstrip("\n").partition("/")[2]
                if path and os.path.basename(path).startswith("libnccl.so"):  # (not a plugin, libnccl-net.so)
                    return "/" + path
    except OSError:
        pass
    return None


def _candidates():
    loaded = loaded_in_process()
    env = os.environ.get("PHALANX_NCCL_LIBRARY")
    if loaded:
        if env and os.path.realpath(env) != os.path.realpath(loaded):
            warnings.warn(f"PHALANX_NCCL_LIBRARY={env} is not used: this process already has {loaded} loaded "
                          "(torch's), and two copies of NCCL in one process do not work together")
        yield loaded
        return
    if env:
        yield env
    try:
        import nvidia.nccl  # the nvidia-nccl-cu13 wheel
        for d in list(getattr(nvidia.nccl, "__path__", [])):
            yield from sorted(glob.glob(os.path.join(d, "lib", "libnccl.so*")))
    except ImportError:
        pass
    found = ctypes.util.find_library("nccl")
    if found:
        yield found
    yield "libnccl.so.2"


def library():
    """The NCCL library (loaded once), or RuntimeError saying how to get it."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        lib.ncclGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, _UniqueId, ctypes.c_int]
        for name in ("ncclAllReduce", "ncclReduceScatter"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclBroadcast.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclAllGather.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                      ctypes.c_void_p, ctypes.c_void_p]
        for name in ("ncclSend", "ncclRecv"):
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_void_p, ctypes.c_void_p]
        lib.ncclCommGetAsyncError.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        lib.ncclCommAbort.argtypes = [ctypes.c_void_p]
        lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
        _lib, _lib_path = lib, loaded_in_process() or path
        return lib
    raise RuntimeError("backend='nccl' needs the NCCL library, and none loads here: pip install nvidia-nccl-cu13 "
                       "(or set PHALANX_NCCL_LIBRARY to libnccl.so.2). Tried: " + "; ".join(tried))


def version():
    """NCCL's version as "2.27.3" (the loaded library's own word), or "unknown"."""
    lib = library()
    code = ctypes.c_int(0)
    if lib.ncclGetVersion(ctypes.byref(code)) != 0 or code.value <= 0:
        return "unknown"
    v = code.value  # NCCL >= 2.9: major * 10000 + minor * 100 + patch; before: major * 1000 + minor * 100 + patch
    return f"{v // 10000}.{v % 10000 // 100}.{v % 100}" if v >= 20900 else f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def interface_of(address):
    """The name of this machine's network interface that holds IPv4 `address`, or None."""
    try:
        ip = socket.inet_aton(socket.gethostbyname(address))
    except OSError:
        return None
    if ip[0] == 127:
        return "lo"  # Linux answers the whole of 127.0.0.0/8 on loopback
    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                if fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)[20:24] == ip:
                    return name
            except OSError:  # an interface without an IPv4 address
                continue
    return None


def _node_host():
    """This node's host as the cluster knows it (its raylet's address in the GCS)."""
    me = state.info["node_id"].hex()
    for n in all_nodes(state.info["gcs_address"]):
        if n["node_id"] == me:
            return n["address"].rpartition(":")[0].strip("[]") or "127.0.0.1"
    return "127.0.0.1"


def choose_interface(node_host=None):
    """Sets NCCL_SOCKET_IFNAME for NCCL's bootstrap unless the user did, before NCCL first
    runs here (NCCL reads it once per process). Returns (interface, why) for error messages."""
    global _interface
    if _interface is not None:
        return _interface
    user = os.environ.get("NCCL_SOCKET_IFNAME")
    if user:
        _interface = (user, "NCCL_SOCKET_IFNAME, as set")
        return _interface
    host = node_host if node_host is not None else _node_host()
    name = interface_of(host)
    if name is None:
        _interface = ("NCCL's own choice", f"no interface here holds this node's address {host}")
        return _interface
    os.environ["NCCL_SOCKET_IFNAME"] = "=" + name  # "=": this interface exactly, not every name it begins
    _interface = (name, f"the interface of this node's address {host}")
    return _interface


def describe():
    """Which NCCL and which network: the facts an init failure is read with."""
    name, why = _interface or ("NCCL's own choice", "not chosen yet")
    debug = os.environ.get("NCCL_DEBUG")
    hint = f"NCCL_DEBUG={debug}: NCCL's account is in this process's log" if debug else \
        "NCCL_DEBUG=INFO in the environment phalanx starts from gives NCCL's own account"
    return f"library {_lib_path}, NCCL {version()}, bootstrap interface {name} ({why}); {hint}"


def check_available():
    """RuntimeError unless this process can use NCCL: torch with a CUDA device, and the library."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            raise RuntimeError("backend='nccl' takes CUDA torch tensors, and torch is not installed "
                               "(pip install torch)") from None
    if not torch.cuda.is_available():
        raise RuntimeError("backend='nccl' needs a CUDA device in this process, and torch sees none "
                           f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}; an actor "
                           "asks for one with num_gpus=1)")
    library()


def _error(lib, code):
    return f"NCCL error {code}: {lib.ncclGetErrorString(code).decode(errors='replace')}"


def new_unique_id():
    lib = library()
    uid = _UniqueId()
    code = lib.ncclGetUniqueId(ctypes.byref(uid))
    if code != 0:
        raise CollectiveError(f"ncclGetUniqueId failed: {_error(lib, code)} ({describe()})")
    return bytes(uid.internal)


class Communicator:
    """One rank's NCCL communicator of a group: in-place collectives on CUDA
    tensors, each waited for until its deadline, aborted past it."""

    def __init__(self, group_name, world_size, rank, unique_id):
        import torch
        self.lib, self.name, self.world_size, self.rank = library(), group_name, world_size, rank
        self.device = torch.cuda.current_device()
        self.broken = None
        uid = _UniqueId()
        uid.internal = unique_id
        comm = ctypes.c_void_p()
        code = self.lib.ncclCommInitRank(ctypes.byref(comm), world_size, uid, rank)
        if code != 0:
            raise CollectiveError(f"group '{group_name}': ncclCommInitRank as rank {rank} of {world_size} failed: "
                                  f"{_error(self.lib, code)} ({describe()}); the group was not formed, its name "
                                  "is free for another init_group")
        self.comm = comm

    def _check(self, tensor, what):
        import torch
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cuda":
            raise ValueError(f"group '{self.name}' (nccl) {what} takes CUDA tensors, got "
                             f"{getattr(tensor, 'device', type(tensor).__name__)}")
        if tensor.device.index != self.device:
            raise ValueError(f"group '{self.name}' (nccl) {what}: the tensor is on cuda:{tensor.device.index}, this "
                             f"rank's communicator on cuda:{self.device}")
        if not tensor.is_contiguous():
            raise ValueError(f"group '{self.name}' (nccl) {what} takes contiguous tensors (tensor.contiguous())")
        dtype = str(tensor.dtype).rpartition(".")[2]
        if dtype not in _DTYPES:
            raise ValueError(f"group '{self.name}' (nccl) {what}: NCCL has no {dtype} "
                             f"(it takes {', '.join(sorted(_DTYPES))})")
        return _DTYPES[dtype]

    def _run(self, what, launch, timeout):
        """Queues the operation on the current stream and waits for it until the deadline."""
        import torch
        if self.broken is not None:
            raise CollectiveError(f"group '{self.name}' (nccl) is broken since {self.broken}: destroy_group and "
                                  "init_group again")
        stream = torch.cuda.current_stream(self.device)
        code = launch(ctypes.c_void_p(stream.cuda_stream))
        if code not in (0, _IN_PROGRESS):
            self._abort(f"{what} failed: {_error(self.lib, code)}")
        done = torch.cuda.Event()
        done.record(stream)
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 20e-6
        while not done.query():
            err = ctypes.c_int(0)
            self.lib.ncclCommGetAsyncError(self.comm, ctypes.byref(err))
            if err.value not in (0, _IN_PROGRESS):
                self._abort(f"{what} failed: {_error(self.lib, err.value)}")
            if deadline is not None and time.monotonic() > deadline:
                self._abort(f"{what} did not finish within {timeout} s (a rank did not make the call, or its "
                            "process or node died)", timeout=True)
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def _abort(self, why, timeout=False):
        self.broken = f"rank {self.rank}: {why}"
        self.lib.ncclCommAbort(self.comm)
        self.comm = None
        message = f"group '{self.name}' (nccl), rank {self.rank}: {why}; the communicator was aborted"
        raise (GetTimeoutError if timeout else CollectiveError)(message)

    def allreduce(self, tensor, op, timeout):
        dt = self._check(tensor, "allreduce")
        p = tensor.data_ptr()
        self._run("allreduce", lambda s: self.lib.ncclAllReduce(p, p, tensor.numel(), dt, _OPS[op], self.comm, s),
                  timeout)

    def broadcast(self, tensor, src_rank, timeout):
        dt = self._check(tensor, "broadcast")
        p = tensor.data_ptr()
        self._run("broadcast", lambda s: self.lib.ncclBroadcast(p, p, tensor.numel(), dt, src_rank, self.comm, s),
                  timeout)

    def allgather(self, tensor_list, tensor, timeout):
        import torch
        dt = self._check(tensor, "allgather")
        out = torch.empty((self.world_size,) + tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
        self._run("allgather", lambda s: self.lib.ncclAllGather(tensor.data_ptr(), out.data_ptr(), tensor.numel(),
                                                                dt, self.comm, s), timeout)
        for r, t in enumerate(tensor_list):
            t.copy_(out[r])

    def reducescatter(self, tensor, tensor_list, op, timeout):
        import torch
        dt = self._check(tensor, "reducescatter")
        for t in tensor_list:
            if t.shape != tensor.shape:
                raise ValueError(f"group '{self.name}' (nccl) reducescatter: every part has the output's shape "
                                 f"{tuple(tensor.shape)}, got {tuple(t.shape)}")
        flat = torch.cat([t.reshape(-1) for t in tensor_list])
        self._run("reducescatter", lambda s: self.lib.ncclReduceScatter(flat.data_ptr(), tensor.data_ptr(),
                                                                        tensor.numel(), dt, _OPS[op], self.comm, s),
                  timeout)

    def send(self, tensor, dst_rank, timeout):
        dt = self._check(tensor, "send")
        self._run("send", lambda s: self.lib.ncclSend(tensor.data_ptr(), tensor.numel(), dt, dst_rank, self.comm, s),
                  timeout)

    def recv(self, tensor, src_rank, timeout):
        dt = self._check(tensor, "recv")
        self._run("recv", lambda s: self.lib.ncclRecv(tensor.data_ptr(), tensor.numel(), dt, src_rank, self.comm, s),
                  timeout)

    def destroy(self):
        if self.comm is not None:
            self.lib.ncclCommDestroy(self.comm)
            self.comm = None
