"""Static collective groups: processes (usually actors) that know their peers
call init_group(world_size, rank, group_name) once, then in-place
allreduce/broadcast/allgather/reducescatter/barrier/send/recv, as with Ray's
collective library.

The ranks meet once, at init_group, through the GCS (scheduler/
rendezvous.h): each hands in where it listens, and every pair of ranks then
opens one authenticated connection (a Unix socket between ranks on one
node, TCP between nodes, TLS under --tls: worker/group_channel.h). Every
later call goes rank to rank over those connections, in C++ with the GIL
released, with no GCS and no raylet on its path
(collectives/group_collectives.h): allreduce by recursive doubling for small
arrays and a pipelined ring for large ones, broadcast by a binomial tree or a
pipelined chain, allgather and reducescatter by the ring.

Every message says what its sender thinks the call is ("allreduce op=sum
float32 (1000,)"): ranks that disagree (another call, dtype or shape) all
raise a CollectiveError naming both, and the group goes on. Each call takes
`timeout` (seconds; None waits for ever); a rank that times out tells the
others, so none waits for it. A rank whose process exits (or whose node
becomes unreachable: keepalive) fails the others' calls at once, naming it,
and every later call of the group."""
import os
import pickle
import sys
import threading
import time

import numpy as np

from phalanx import _core
from phalanx._private import stuck as _stuck
from phalanx._private import api, nccl, state
from phalanx.exceptions import CollectiveError, GetTimeoutError

_groups = {}
_lock = threading.Lock()
OPS = ("sum", "prod", "min", "max")  # the reduce ops every collective takes
_P2P = 1 << 63  # point-to-point calls are numbered apart from the group's calls


def check_op(op):
    if op not in OPS:
        raise ValueError(f"unknown reduce op {op!r} (expected one of {', '.join(OPS)})")


def _is_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _assign(dst, src):
    """dst[...] = src, in place (a tensor that requires grad too)."""
    if _is_tensor(dst):
        import torch
        with torch.no_grad():
            dst.copy_(src if isinstance(src, torch.Tensor) else torch.as_tensor(src))
    else:
        dst[...] = src


_dtype_names = {}  # dtype -> its name as the C++ side reads it (str(dtype) is slow)


def _dtype_name(array):
    dtype = array.dtype
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype).replace("torch.", "")
    return name


class _Buffer:
    """A C-contiguous numpy view of `array` for the C++ side: the array's own
    memory when it is contiguous (and writable, if `writable`), else a copy
    that done() writes back."""

    def __init__(self, array, writable=True):
        self.array, self.copied = array, False
        if _is_tensor(array):
            torch = sys.modules["torch"]
            t = array.detach()
            if not t.is_contiguous():
                t, self.copied = t.contiguous(), True
            # bfloat16 has no numpy dtype: its bits travel as int16 (the C++ side reads dtype by name)
            self.view = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()
        else:
            view = array
            if not view.flags.c_contiguous or (writable and not view.flags.writeable):
                view, self.copied = np.ascontiguousarray(view).copy(), True
            self.view = view

    def done(self):
        if self.copied:
            torch = sys.modules.get("torch")
            src = self.view
            if _is_tensor(self.array) and self.array.dtype == torch.bfloat16:
                src = torch.from_numpy(src).view(torch.bfloat16)
            _assign(self.array, src)


_whats = {}  # (kind, dtype, shape, facts) -> what; a few entries per program


def _what(kind, array=None, **facts):
    """What a call is, as every rank must say it ("allreduce op=sum float32 (1000,)")."""
    key = (kind, None if array is None else array.dtype, None if array is None else tuple(array.shape),
           tuple(facts.items()))
    what = _whats.get(key)
    if what is None:
        parts = [kind] + [f"{k}={v}" for k, v in facts.items()]
        if array is not None:
            parts += [_dtype_name(array), str(tuple(array.shape))]
        what = " ".join(parts)
        if len(what) > 200:
            what = what[:180] + f"... #{hash(what) & 0xffffffff:08x}"
        if len(_whats) < 4096:
            _whats[key] = what
    return what


class _StuckSlot(_stuck.Slot):
    __slots__ = ("kind_call",)


class _Group:
    def __init__(self, name, world_size, rank, nonce, channel, names):
        self.name, self.world_size, self.rank, self.nonce = name, world_size, rank, nonce
        self.channel = channel  # _core.Group (None for the NCCL backend)
        self.names = names  # how errors name each rank
        self.seq = 0
        self.pair_seq = {}  # (src, dst) -> point-to-point calls made between them
        self.nccl = None  # backend="nccl": the NCCL communicator (nccl.py)
        self.slot = _StuckSlot(self._stuck)

    def _label(self, kind, call):
        return f"group '{self.name}' {kind} (call {call & 0xffffffffff})"

    def _run(self, kind, timeout, call, fn):
        """Runs fn(ms) (one call of the channel), naming the group and call in its errors."""
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive or None, got {timeout}")
        if self.channel is None:
            raise CollectiveError(f"group '{self.name}' was destroyed")
        ms = -1 if timeout is None else max(1, int(timeout * 1000))
        slot = self.slot
        slot.kind_call = kind, call
        started = slot.since = time.monotonic()
        try:
            fn(ms)
        except GetTimeoutError as e:
            raise GetTimeoutError(f"{self._label(kind, call)}: no answer within "
                                  f"{time.monotonic() - started:.1f} s: {e}") from None
        except CollectiveError as e:
            raise CollectiveError(f"{self._label(kind, call)}: {e}") from None
        finally:
            slot.since = None

    def _stuck(self, waited):
        """The stuck-call report: the call, and whom this rank waits for."""
        channel = self.channel
        w = channel.waiting_for if channel is not None else -1
        whom = self.names[w] if 0 <= w < len(self.names) else "the other ranks"
        kind, call = self.slot.kind_call
        return f"{self._label(kind, call)} on rank {self.rank} has waited {waited:.0f} s; it waits for {whom}"

    def _call(self):
        self.seq += 1
        return self.seq

    def allreduce(self, array, op, timeout):
        call, buf = self._call(), _Buffer(array)
        what = _what("allreduce", array, op=op)
        self._run("allreduce", timeout, call,
                  lambda ms: self.channel.allreduce(call, what, buf.view, _dtype_name(array), op, ms))
        buf.done()

    def reducescatter(self, array, tensor_list, op, timeout):
        """array[...] = this rank's part (numpy.array_split along axis 0) of op
        over the ranks' concatenated lists."""
        call = self._call()
        if _is_tensor(array):
            total = sys.modules["torch"].cat([t.detach() for t in tensor_list])
        else:
            total = np.concatenate(tensor_list)
        sizes = [len(x) for x in np.array_split(np.arange(total.shape[0]), self.world_size)]
        row_cuts = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        per_row = int(np.prod(total.shape[1:], dtype=np.int64))
        cuts = [c * per_row for c in row_cuts]
        buf = _Buffer(total)
        what = _what("reducescatter", total, op=op)
        self._run("reducescatter", timeout, call, lambda ms: self.channel.reducescatter(
            call, what, buf.view, _dtype_name(total), op, cuts, ms))
        part = total[row_cuts[self.rank]:row_cuts[self.rank + 1]]
        if tuple(part.shape) != tuple(array.shape):
            raise ValueError(f"reducescatter: this rank's part is {tuple(part.shape)}, the array "
                             f"{tuple(array.shape)}")
        _assign(array, part)

    def broadcast(self, array, src_rank, timeout):
        call, buf = self._call(), _Buffer(array)
        what = _what("broadcast", array, src=src_rank)
        self._run("broadcast", timeout, call,
                  lambda ms: self.channel.broadcast(call, what, buf.view, src_rank, ms))
        buf.done()

    def allgather(self, tensor_list, array, timeout):
        call, mine = self._call(), _Buffer(array, writable=False).view
        blocks = np.empty((self.world_size,) + mine.shape, mine.dtype)
        blocks[self.rank] = mine
        what = _what("allgather", array)
        self._run("allgather", timeout, call, lambda ms: self.channel.allgather(call, what, blocks, ms))
        torch = sys.modules.get("torch")
        for r in range(self.world_size):
            src = blocks[r]
            if torch is not None and _is_tensor(tensor_list[r]) and tensor_list[r].dtype == torch.bfloat16:
                src = torch.from_numpy(src).view(torch.bfloat16)
            _assign(tensor_list[r], src)

    def barrier(self, timeout):
        call = self._call()
        self._run("barrier", timeout, call, lambda ms: self.channel.barrier(call, "barrier", ms))

    def _pair_call(self, src, dst):
        n = self.pair_seq[(src, dst)] = self.pair_seq.get((src, dst), 0) + 1
        return _P2P | (src << 42) | (dst << 21) | (n & 0x1fffff)

    def send(self, array, dst_rank, timeout):
        """Hands `array` to dst_rank's matching recv (returns once its bytes are in the connection)."""
        call, buf = self._pair_call(self.rank, dst_rank), _Buffer(array, writable=False)
        what = _what("p2p", array)
        self._run("send", timeout, call, lambda ms: self.channel.send(call, what, buf.view, dst_rank, ms))

    def recv(self, array, src_rank, timeout):
        """array[...] = what src_rank's matching send sent."""
        call, buf = self._pair_call(src_rank, self.rank), _Buffer(array)
        what = _what("p2p", array)
        self._run("recv", timeout, call, lambda ms: self.channel.recv(call, what, buf.view, src_rank, ms))
        buf.done()

    def close(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None


BACKENDS = ("object", "nccl")


def init_group(world_size, rank, group_name="default", timeout=60.0, backend="object"):
    """Joins this process to `group_name` as `rank` of `world_size`, once
    every rank has called it (GetTimeoutError naming the missing ranks
    after `timeout` s). `backend`: "object" (arrays and CPU tensors over the
    object layer) or "nccl" (CUDA tensors by NCCL on the GPUs, nccl.py;
    RuntimeError saying what is missing where NCCL or a GPU is not)."""
    backend = str(backend).lower()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "nccl":
        nccl.check_available()
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be between 0 and {world_size - 1}, got {rank!r}")
    if not isinstance(group_name, str) or not group_name:
        raise ValueError(f"group_name must be a non-empty str, got {group_name!r}")
    api.ensure_initialized()
    with _lock:
        if group_name in _groups:
            raise ValueError(f"this process is already in group '{group_name}' (destroy_group first)")
    started = time.monotonic()
    me = {"rank": rank, "world": world_size, "nonce": os.urandom(8).hex(), "node": state.info["node_id"],
          "client": state.info["client_id"], "backend": backend, "pid": os.getpid()}
    channel = None
    if backend == "object":
        channel = _core.open_group(group_name, rank, world_size)  # listening: its addresses go to the meeting
        me["addresses"] = channel.addresses
    if backend == "nccl":
        nccl.choose_interface()  # before NCCL first runs here: it reads the interface once per process
    if backend == "nccl" and rank == 0:
        me["nccl_id"] = nccl.new_unique_id()  # handed to every rank by the rendezvous
    try:
        joined, names = meet(group_name, world_size, me, channel, timeout, started)
    except BaseException:
        if channel is not None:
            channel.close()
        raise
    g = _Group(group_name, world_size, rank, joined[0]["nonce"], channel, names)
    if backend == "nccl":
        g.nccl = nccl.Communicator(group_name, world_size, rank, joined[0]["nccl_id"])
    with _lock:
        _groups[group_name] = g


def arrival(rank, world_size, channel, name):
    """What a rank of an object-backend group hands in at the meeting (meet's
    `me`): its channel's addresses, and `name` (with its pid) for errors."""
    return {"rank": rank, "world": world_size, "nonce": os.urandom(8).hex(), "node": state.info["node_id"],
            "backend": "object", "name": f"{name}, pid {os.getpid()}", "addresses": channel.addresses}


def meet(group_name, world_size, me, channel, timeout, started):
    """The rendezvous of a forming group: every rank's `me` (its "world",
    "node", "backend", "nonce", "addresses" for `channel` and "name" or "pid"
    for errors), checked to agree, then `channel` (a _core.Group, or None)
    connected to the others. Returns (every rank's `me`, how errors name each
    rank). GetTimeoutError naming the ranks missing after `timeout` s since
    `started` (time.monotonic())."""
    rank = me["rank"]
    ms = -1 if timeout is None else max(1, int((timeout - (time.monotonic() - started)) * 1000))
    try:
        raw = _core.rendezvous(f"init:{group_name}", rank, world_size, pickle.dumps(me), ms)
    except GetTimeoutError as e:
        raise GetTimeoutError(f"group '{group_name}' was not formed: {e}") from None
    except ValueError as e:  # ranks that disagree on the size
        raise ValueError(f"group '{group_name}' was not formed: {e}") from None
    joined = [pickle.loads(p) for p in raw]
    for r, j in enumerate(joined):
        if "abandoned" in j:  # (arrived for a rank that will not: abandon())
            raise CollectiveError(f"group '{group_name}' was not formed: {j['abandoned']}")
        if j["world"] != world_size:
            raise ValueError(f"group '{group_name}': rank {r} says world_size {j['world']}, this rank {world_size}")
        if j.get("backend", "object") != me["backend"]:
            raise ValueError(f"group '{group_name}': rank {r} asked for backend {j.get('backend', 'object')!r}, "
                             f"this rank {me['backend']!r}")
    names = [f"rank {r} ({j['name'] if 'name' in j else 'pid ' + str(j.get('pid', '?'))} on node "
             f"{j['node'].hex()[:12]})" for r, j in enumerate(joined)]
    if channel is not None:
        left = -1 if timeout is None else max(1, int((timeout - (time.monotonic() - started)) * 1000))
        try:
            channel.connect([(j["node"], j["addresses"], n) for j, n in zip(joined, names)], joined[0]["nonce"],
                            left if left > 0 else 30000)
        except GetTimeoutError as e:
            raise GetTimeoutError(f"group '{group_name}' was not formed: {e}") from None
    return joined, names


def abandon(group_name, world_size, ranks, why):
    """Arrives at a forming group's meeting for `ranks` (whose processes will
    not come), so the ranks that did come stop waiting and fail with `why`.
    Returns at once (the arrivals wait on a thread of their own)."""
    def arrive(rank):
        try:
            _core.rendezvous(f"init:{group_name}", rank, world_size,
                             pickle.dumps({"rank": rank, "world": world_size, "abandoned": why}), 60000)
        except Exception:  # noqa: BLE001 - (the others are gone too: nothing waits any more)
            pass
    for rank in ranks:
        threading.Thread(target=arrive, args=(rank,), name="phalanx-group-abandon", daemon=True).start()


def destroy_group(group_name="default"):
    """Leaves the group (a later init_group with the same name forms a new one)."""
    with _lock:
        g = _groups.pop(group_name, None)
    if g is None:
        return
    g.close()
    if g.nccl is not None:
        g.nccl.destroy()


def _group(name):
    g = _groups.get(name)
    if g is None:
        raise ValueError(f"this process is not in group '{name}': call init_group(world_size, rank, '{name}') first")
    return g


def _check_array(array, what, in_place=True):
    if _is_tensor(array):
        if array.device.type != "cpu":
            raise ValueError(f"{what} got a tensor on {array.device}: groups over the object layer take CPU "
                             "tensors and numpy arrays (tensor.cpu() makes one; a group made with "
                             "backend='nccl' takes CUDA tensors)")
        if array.layout is not sys.modules["torch"].strided:
            raise ValueError(f"{what} got a {array.layout} tensor: only dense tensors (tensor.to_dense())")
        return
    if not isinstance(array, np.ndarray):
        what_it_takes = "changed in place" if in_place else "sent"
        raise TypeError(f"{what} takes a numpy array or a CPU torch tensor ({what_it_takes}), got "
                        f"{type(array).__name__}")
    if in_place and not array.flags.writeable:
        raise ValueError(f"{what} changes the array in place, but it is read-only (np.array(x) makes a copy)")


def group_allreduce(array, op="sum", group_name="default", timeout=None):
    """array[...] = op over every rank's array (in place)."""
    check_op(op)
    g = _group(group_name)
    if g.nccl is not None:
        return g.nccl.allreduce(array, op, timeout)
    _check_array(array, "allreduce")
    g.allreduce(array, op, timeout)


def group_broadcast(array, src_rank=0, group_name="default", timeout=None):
    """array[...] = src_rank's array (in place)."""
    g = _group(group_name)
    if not isinstance(src_rank, int) or not 0 <= src_rank < g.world_size:
        raise ValueError(f"src_rank must be between 0 and {g.world_size - 1}, got {src_rank!r}")
    if g.nccl is not None:
        return g.nccl.broadcast(array, src_rank, timeout)
    _check_array(array, "broadcast")
    g.broadcast(array, src_rank, timeout)


def group_allgather(tensor_list, array, group_name="default", timeout=None):
    """tensor_list[r][...] = rank r's array, for every rank r."""
    g = _group(group_name)
    if len(tensor_list) != g.world_size:
        raise ValueError(f"allgather needs a list of {g.world_size} arrays (one per rank), got {len(tensor_list)}")
    if g.nccl is not None:
        return g.nccl.allgather(tensor_list, array, timeout)
    _check_array(array, "allgather")
    for i, t in enumerate(tensor_list):
        _check_array(t, "allgather")
        if t.shape != array.shape or t.dtype != array.dtype:
            raise ValueError(f"allgather: tensor_list[{i}] is {t.dtype} {t.shape}, the array {array.dtype} "
                             f"{array.shape} (every rank's array has one dtype and shape)")
    g.allgather(tensor_list, array, timeout)


def group_reducescatter(array, tensor_list, op="sum", group_name="default", timeout=None):
    """array[...] = this rank's part (numpy.array_split along axis 0) of op
    over the ranks' concatenated lists."""
    check_op(op)
    g = _group(group_name)
    if len(tensor_list) != g.world_size:
        raise ValueError(f"reducescatter needs a list of {g.world_size} arrays, got {len(tensor_list)}")
    if g.nccl is not None:
        return g.nccl.reducescatter(array, tensor_list, op, timeout)
    _check_array(array, "reducescatter")
    for t in tensor_list:
        _check_array(t, "reducescatter", in_place=False)
    g.reducescatter(array, tensor_list, op, timeout)


def group_barrier(group_name="default", timeout=None):
    """Returns once every rank of the group has called barrier."""
    _group(group_name).barrier(timeout)


def _peer(g, rank, what):
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < g.world_size or rank == g.rank:
        raise ValueError(f"{what} must be another rank of group '{g.name}' (0 to {g.world_size - 1}, not "
                         f"{g.rank}), got {rank!r}")
    return rank


def group_send(array, dst_rank, group_name="default", timeout=None):
    """Sends `array` to `dst_rank`, which calls recv with an array of the
    same dtype and shape. Returns once the bytes are written into the
    connection (a small array at once, as MPI's eager sends; a large one as
    the receiver reads it)."""
    g = _group(group_name)
    if g.nccl is not None:
        return g.nccl.send(array, _peer(g, dst_rank, "dst_rank"), timeout)
    _check_array(array, "send", in_place=False)
    g.send(array, _peer(g, dst_rank, "dst_rank"), timeout)


def group_recv(array, src_rank, group_name="default", timeout=None):
    """array[...] = the array `src_rank` sends (in place)."""
    g = _group(group_name)
    if g.nccl is not None:
        return g.nccl.recv(array, _peer(g, src_rank, "src_rank"), timeout)
    _check_array(array, "recv")
    g.recv(array, _peer(g, src_rank, "src_rank"), timeout)
