"""Static collective groups: processes (usually actors) that know their peers
call init_group(world_size, rank, group_name) once, then in-place
allreduce/broadcast/allgather/reducescatter/barrier, as with Ray's
collective library.

Today a group meets at a coordinator actor named after the group (rank 0
creates it, the others find it by name): each rank hands it its array, it
combines them in arrival order as they come, and each rank reads the
outcome. Values travel as phalanx objects between the ranks' nodes and the
coordinator's. A reduce tree across the members' nodes is the next step
(docs/collectives.md)."""
import threading
import time

import numpy as np

from phalanx.exceptions import CollectiveError, GetTimeoutError, NotFoundError

_groups = {}
_lock = threading.Lock()
_NP_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}
OPS = tuple(_NP_OPS)  # the reduce ops every collective takes


def check_op(op):
    if op not in _NP_OPS:
        raise ValueError(f"unknown reduce op {op!r} (expected one of {', '.join(OPS)})")


class _Coordinator:
    """One per group: gathers each collective call's contributions (keyed by
    the call's sequence number) and answers every rank once all are in."""

    def __init__(self, world_size, group_name):
        self.world_size = world_size
        self.name = group_name
        # seq -> {"kind", "op", "ranks": set(), "parts": {rank: value}, "acc": combined so far, "read": set()}
        self.calls = {}

    def put(self, seq, rank, kind, op, value):
        c = self.calls.setdefault(seq, {"kind": kind, "op": op, "ranks": set(), "parts": {}, "acc": None,
                                        "read": set()})
        if c["kind"] != kind or c["op"] != op:
            raise CollectiveError(f"group '{self.name}' call {seq}: rank {rank} called {kind}({op}) but another "
                                  f"rank called {c['kind']}({c['op']}); every rank must make the same calls in order")
        if rank in c["ranks"]:
            raise CollectiveError(f"group '{self.name}' call {seq}: rank {rank} contributed twice")
        if kind in ("allreduce", "reducescatter"):  # combined as they arrive
            value = np.asarray(value)
            if c["acc"] is None:
                c["acc"] = value.copy()
            elif value.shape != c["acc"].shape or value.dtype != c["acc"].dtype:
                raise CollectiveError(f"group '{self.name}' {kind}: rank {rank} has {value.dtype} {value.shape}, "
                                      f"another rank {c['acc'].dtype} {c['acc'].shape}")
            else:
                _NP_OPS[op](c["acc"], value, out=c["acc"])
        else:
            c["parts"][rank] = value
        c["ranks"].add(rank)
        return True

    def take(self, seq, rank):
        """(done, outcome) for `rank`; the call is forgotten once every rank has read it."""
        c = self.calls.get(seq)
        arrived = len(c["ranks"]) if c else 0
        if c is None or arrived < self.world_size:
            return False, arrived
        kind = c["kind"]
        if kind == "allreduce":
            out = c["acc"]
        elif kind == "reducescatter":
            out = np.array_split(c["acc"], self.world_size)[rank]
        elif kind == "broadcast":
            out = next(v for v in c["parts"].values() if v is not None)
        elif kind == "allgather":
            out = [c["parts"][r] for r in range(self.world_size)]
        else:  # barrier
            out = None
        c["read"].add(rank)
        if len(c["read"]) == self.world_size:
            del self.calls[seq]
        return True, out


class _Group:
    def __init__(self, name, world_size, rank, coordinator):
        self.name, self.world_size, self.rank, self.coordinator = name, world_size, rank, coordinator
        self.seq = 0

    def call(self, kind, op, value, timeout):
        import phalanx
        self.seq += 1
        seq = self.seq
        phalanx.get(self.coordinator.put.remote(seq, self.rank, kind, op, value), timeout=timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.0005
        while True:
            done, out = phalanx.get(self.coordinator.take.remote(seq, self.rank),
                                    timeout=None if deadline is None else max(0.001, deadline - time.monotonic()))
            if done:
                return out
            if deadline is not None and time.monotonic() > deadline:
                raise GetTimeoutError(f"group '{self.name}' {kind}: only {out} of {self.world_size} ranks joined "
                                      f"call {seq} within {timeout} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def init_group(world_size, rank, group_name="default", timeout=60.0):
    """Joins this process to `group_name` as `rank` of `world_size`. Rank 0
    creates the group; the others wait up to `timeout` s for it."""
    import phalanx
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be between 0 and {world_size - 1}, got {rank!r}")
    with _lock:
        if group_name in _groups:
            raise ValueError(f"this process is already in group '{group_name}' (destroy_group first)")
    actor_name = f"phalanx.collective_group.{group_name}"
    if rank == 0:
        Coord = phalanx.remote(_Coordinator)
        coord = Coord.options(name=actor_name).remote(world_size, group_name)
    else:
        deadline = time.monotonic() + timeout
        while True:
            try:
                coord = phalanx.get_actor(actor_name)
                break
            except NotFoundError:
                if time.monotonic() > deadline:
                    raise GetTimeoutError(f"group '{group_name}': rank 0 did not create it within {timeout} s")
                time.sleep(0.05)
    with _lock:
        _groups[group_name] = _Group(group_name, world_size, rank, coord)


def destroy_group(group_name="default"):
    """Leaves the group (rank 0 also ends its coordinator)."""
    import phalanx
    with _lock:
        g = _groups.pop(group_name, None)
    if g is not None and g.rank == 0:
        phalanx.kill(g.coordinator)


def _group(name):
    g = _groups.get(name)
    if g is None:
        raise ValueError(f"this process is not in group '{name}': call init_group(world_size, rank, '{name}') first")
    return g


def _check_array(array, what):
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{what} takes a numpy array (changed in place), got {type(array).__name__}")


def group_allreduce(array, op="sum", group_name="default", timeout=None):
    """array[...] = op over every rank's array (in place)."""
    _check_array(array, "allreduce")
    check_op(op)
    array[...] = _group(group_name).call("allreduce", op, array, timeout)


def group_broadcast(array, src_rank=0, group_name="default", timeout=None):
    """array[...] = src_rank's array (in place)."""
    _check_array(array, "broadcast")
    g = _group(group_name)
    array[...] = g.call("broadcast", src_rank, array if g.rank == src_rank else None, timeout)


def group_allgather(tensor_list, array, group_name="default", timeout=None):
    """tensor_list[r][...] = rank r's array, for every rank r."""
    _check_array(array, "allgather")
    g = _group(group_name)
    if len(tensor_list) != g.world_size:
        raise ValueError(f"allgather needs a list of {g.world_size} arrays (one per rank), got {len(tensor_list)}")
    for dst, src in zip(tensor_list, g.call("allgather", None, array, timeout)):
        dst[...] = src


def group_reducescatter(array, tensor_list, op="sum", group_name="default", timeout=None):
    """array[...] = this rank's part (numpy.array_split along axis 0) of op
    over the ranks' concatenated lists."""
    _check_array(array, "reducescatter")
    g = _group(group_name)
    if len(tensor_list) != g.world_size:
        raise ValueError(f"reducescatter needs a list of {g.world_size} arrays, got {len(tensor_list)}")
    array[...] = g.call("reducescatter", op, np.concatenate(tensor_list), timeout)


def group_barrier(group_name="default", timeout=None):
    """Returns once every rank of the group has called barrier."""
    _group(group_name).call("barrier", None, None, timeout)
