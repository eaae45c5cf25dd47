"""Static collective groups: processes (usually actors) that know their peers
call init_group(world_size, rank, group_name) once, then in-place
allreduce/broadcast/allgather/reducescatter/barrier, as with Ray's
collective library.

The arrays travel over the object layer, as everything else does; nothing
goes through a coordinator process:

- the ranks meet at a rendezvous in the GCS (scheduler/rendezvous.h): each
  hands in where its array is (object id, node, size) with its dtype and
  shape, and gets every rank's. Every rank checks the same facts, so a
  mismatch (another call, dtype or shape) raises the same clear error on
  every rank before any bytes move;
- allreduce (and reducescatter): rank 0 asks its raylet for the ring
  allreduce over the ranks' arrays (collectives/allreduce.h), each result
  made on its rank's node, where the rank waits for it;
- broadcast and allgather: each rank reads the arrays it needs from their
  nodes; many readers of one array form a pipelined chain (the transfer
  layer's receiver-driven broadcast). The ranks then meet once more, so
  that no array is freed while another rank still reads it, and every rank
  learns whether all succeeded.

Each call takes `timeout` (seconds; None waits for ever); a rank that does
not come raises GetTimeoutError naming the ranks missing. A rank whose
process exits or whose node dies fails the others' calls at once, timeout
or not (CollectiveError naming it), and every later call of the group."""
import contextlib
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
_NOT_WATCHED = contextlib.nullcontext()
_lock = threading.Lock()
OPS = ("sum", "prod", "min", "max")  # the reduce ops every collective takes


def check_op(op):
    if op not in OPS:
        raise ValueError(f"unknown reduce op {op!r} (expected one of {', '.join(OPS)})")


def _is_tensor(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _put(array):
    """A store object holding `array` (other nodes copy only store objects): (ref, stored size)."""
    value = array.detach().contiguous() if _is_tensor(array) else np.ascontiguousarray(array)
    return api.put_sized(value, in_store=True)


def _assign(dst, src):
    """dst[...] = src, in place (a tensor that requires grad too)."""
    if _is_tensor(dst):
        import torch
        with torch.no_grad():
            dst.copy_(src if isinstance(src, torch.Tensor) else torch.as_tensor(src))
    else:
        dst[...] = src


class _Call:
    """One collective call of one rank: its deadline and its rendezvous.
    `pair` = (src, dst): a point-to-point call, met by those two ranks only."""

    def __init__(self, group, kind, timeout, pair=None):
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive or None, got {timeout}")
        if pair is None:
            group.seq += 1
            self.seq = group.seq
            self.ranks = list(range(group.world_size))
        else:
            n = group.pair_seq[pair] = group.pair_seq.get(pair, 0) + 1
            self.seq = f"p2p{pair[0]}>{pair[1]}:{n}"
            self.ranks = list(pair)
        self.g, self.kind = group, kind
        self.deadline = None if timeout is None else time.monotonic() + timeout

    def what(self):
        return f"group '{self.g.name}' {self.kind} (call {self.seq})"

    def left_ms(self):
        """Milliseconds to the deadline (at least 1), or -1 without one."""
        if self.deadline is None:
            return -1
        return max(1, int((self.deadline - time.monotonic()) * 1000))

    def left_s(self):
        return None if self.deadline is None else max(0.001, self.deadline - time.monotonic())

    def meet(self, phase, payload):
        """Every rank's payload (by rank), once all have handed theirs in."""
        key = f"{self.g.name}:{self.g.nonce}:{self.seq}:{phase}"
        r = self.ranks
        left = self.left_ms()
        try:
            with _stuck.watch(lambda waited: self.stuck(key, waited)) if left < 0 or left > _stuck.threshold_ms() \
                    else _NOT_WATCHED:
                raw = _core.rendezvous(key, r.index(self.g.rank), len(r), pickle.dumps(payload), left,
                                       [self.g.nodes[i] for i in r], [self.g.clients[i] for i in r])
        except GetTimeoutError as e:
            raise GetTimeoutError(f"{self.what()}: {e}") from None
        except CollectiveError as e:  # a rank's node died or its process exited
            raise CollectiveError(f"{self.what()}: {e}") from None
        return [pickle.loads(p) for p in raw]

    def stuck(self, key, waited):
        """The stuck-call report of a meeting: which ranks have not arrived, and where they are."""
        try:
            arrived = set(_stuck.arrived_ranks(key))
        except Exception as e:  # noqa: BLE001 - (the GCS may be away)
            return f"{self.what()} on rank {self.g.rank} has waited {waited:.0f} s for the other ranks " \
                   f"(the GCS could not say which: {e})"
        me = self.ranks.index(self.g.rank)
        missing = [self.ranks[x] for x in range(len(self.ranks)) if x not in arrived and x != me]
        where = ", ".join(f"rank {m} (node {self.g.nodes[m].hex()[:12]})" for m in missing) or "none (completing)"
        return (f"{self.what()} on rank {self.g.rank} has waited {waited:.0f} s for the other ranks; "
                f"not arrived: {where}")

    def agree(self, metas, fields):
        """Raises the same CollectiveError on every rank unless all ranks made
        this call with the same `fields` (kind, op, dtype, shape, ...)."""
        first = metas[0]
        for r, m in enumerate(metas):
            for f in ("kind",) + fields:
                if m.get(f) != first.get(f):
                    raise CollectiveError(
                        f"{self.what()}: rank {r} has {f} {m.get(f)!r} but rank 0 has {first.get(f)!r}; every rank "
                        "must make the same calls in the same order, with arrays of one dtype and shape")

    def finish(self, error):
        """The last meeting: every rank says whether it succeeded; raises if any did not."""
        outcomes = self.meet("end", None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        for r, why in enumerate(outcomes):
            if why is not None:
                raise CollectiveError(f"{self.what()}: rank {r} failed: {why}")


def _meta(kind, array, ref=None, size=0, **extra):
    m = {"kind": kind, "dtype": str(array.dtype), "shape": tuple(array.shape), "node": state.info["node_id"],
         "id": None if ref is None else ref.binary(), "size": size}
    m.update(extra)
    return m


def _locate(metas, ranks):
    """Refs (held by this process) to the arrays of `ranks`, read from their nodes when got."""
    ids = [metas[r]["id"] for r in ranks]
    refs = [_core.ObjectRef(i) for i in ids]
    _core.locate(ids, [metas[r]["node"] for r in ranks], [metas[r]["size"] for r in ranks])
    return refs


class _Group:
    def __init__(self, name, world_size, rank, nonce, nodes, clients):
        self.name, self.world_size, self.rank, self.nonce = name, world_size, rank, nonce
        self.nodes, self.clients = nodes, clients  # each rank's node and process: a wait fails when one dies
        self.seq = 0
        self.pair_seq = {}  # (src, dst) -> point-to-point calls made between them
        self.nccl = None  # backend="nccl": the NCCL communicator (nccl.py)

    def allreduce(self, array, op, timeout, kind="allreduce"):
        """op over every rank's `array`: a read-only view on the result in
        this node's store (copy out of it; it goes with the view)."""
        call = _Call(self, kind, timeout)
        ref, size = _put(array)
        out = _core.next_put_id()
        out_ref = _core.ObjectRef(out)  # held here before rank 0 asks for it to be made here
        metas = call.meet("data", _meta(kind, array, ref, size, op=op, out=out))
        call.agree(metas, ("op", "dtype", "shape"))
        if self.rank == 0:
            others = list(range(1, self.world_size))
            located = _locate(metas, others)
            outs = [m["out"] for m in metas]
            _core.allreduce(outs, [m["id"] for m in metas], op, call.left_ms(), True)
            for o in outs:
                _core.adopt_ref(o)  # (the raylet holds them for us until made; we keep only ours)
            del located
        try:
            return api.get(out_ref, timeout=call.left_s())
        except GetTimeoutError as e:
            raise GetTimeoutError(f"{call.what()}: the reduced array did not come: {e}") from None
        except CollectiveError as e:
            raise CollectiveError(f"{call.what()}: {e}") from None

    def broadcast(self, array, src_rank, timeout):
        call = _Call(self, "broadcast", timeout)
        ref, size = _put(array) if self.rank == src_rank else (None, 0)
        metas = call.meet("data", _meta("broadcast", array, ref, size, src=src_rank))
        call.agree(metas, ("src", "dtype", "shape"))
        error = None
        if self.rank != src_rank:
            try:
                _assign(array, api.get(_locate(metas, [src_rank])[0], timeout=call.left_s()))
            except Exception as e:  # told to every rank at the last meeting
                error = e
        call.finish(error)

    def allgather(self, tensor_list, array, timeout):
        call = _Call(self, "allgather", timeout)
        ref, size = _put(array)
        metas = call.meet("data", _meta("allgather", array, ref, size))
        call.agree(metas, ("dtype", "shape"))
        error = None
        try:
            others = [r for r in range(self.world_size) if r != self.rank]
            values = api.get(_locate(metas, others), timeout=call.left_s())
            for r, v in zip(others, values):
                _assign(tensor_list[r], v)
            _assign(tensor_list[self.rank], array)
        except Exception as e:
            error = e
        call.finish(error)

    def barrier(self, timeout):
        call = _Call(self, "barrier", timeout)
        call.agree(call.meet("data", {"kind": "barrier"}), ())

    def send(self, array, dst_rank, timeout):
        """Hands `array` to dst_rank's matching recv; returns once it has it."""
        call = _Call(self, "p2p", timeout, pair=(self.rank, dst_rank))
        ref, size = _put(array)
        metas = call.meet("data", _meta("p2p", array, ref, size))
        call.agree(metas, ("dtype", "shape"))
        call.finish(None)  # (the receiver has copied it: the ref may go)

    def recv(self, array, src_rank, timeout):
        """array[...] = what src_rank's matching send sent."""
        call = _Call(self, "p2p", timeout, pair=(src_rank, self.rank))
        metas = call.meet("data", _meta("p2p", array))
        call.agree(metas, ("dtype", "shape"))
        error = None
        try:
            _assign(array, api.get(_locate(metas, [0])[0], timeout=call.left_s()))
        except Exception as e:  # told to the sender at the last meeting
            error = e
        call.finish(error)


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
    ms = -1 if timeout is None else max(1, int(timeout * 1000))
    me = {"world": world_size, "nonce": os.urandom(8).hex(), "node": state.info["node_id"],
          "client": state.info["client_id"], "backend": backend}
    if backend == "nccl":
        nccl.choose_interface()  # before NCCL first runs here: it reads the interface once per process
    if backend == "nccl" and rank == 0:
        me["nccl_id"] = nccl.new_unique_id()  # handed to every rank by the rendezvous
    try:
        raw = _core.rendezvous(f"init:{group_name}", rank, world_size, pickle.dumps(me), ms)
    except GetTimeoutError as e:
        raise GetTimeoutError(f"group '{group_name}' was not formed: {e}") from None
    except ValueError as e:  # ranks that disagree on the size
        raise ValueError(f"group '{group_name}' was not formed: {e}") from None
    joined = [pickle.loads(p) for p in raw]
    for r, j in enumerate(joined):
        if j["world"] != world_size:
            raise ValueError(f"group '{group_name}': rank {r} says world_size {j['world']}, this rank {world_size}")
        if j.get("backend", "object") != backend:
            raise ValueError(f"group '{group_name}': rank {r} asked for backend {j.get('backend', 'object')!r}, "
                             f"this rank {backend!r}")
    g = _Group(group_name, world_size, rank, joined[0]["nonce"], [j["node"] for j in joined],
               [j["client"] for j in joined])
    if backend == "nccl":
        g.nccl = nccl.Communicator(group_name, world_size, rank, joined[0]["nccl_id"])
    with _lock:
        _groups[group_name] = g


def destroy_group(group_name="default"):
    """Leaves the group (a later init_group with the same name forms a new one)."""
    with _lock:
        g = _groups.pop(group_name, None)
    if g is not None and g.nccl is not None:
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
    _assign(array, g.allreduce(array, op, timeout))


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
    if _is_tensor(array):
        import torch
        total = g.allreduce(torch.cat([t.detach() for t in tensor_list]), op, timeout, kind="reducescatter")
        _assign(array, torch.tensor_split(total, g.world_size)[g.rank])
    else:
        total = g.allreduce(np.concatenate(tensor_list), op, timeout, kind="reducescatter")
        _assign(array, np.array_split(total, g.world_size)[g.rank])


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
    same dtype and shape; returns once it has received it."""
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
