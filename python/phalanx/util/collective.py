"""`ray.util.collective` under its own name: static groups of processes
(usually actors) that call the same collectives in the same order, with
the signatures of Ray's collective library. The arrays are numpy arrays or
CPU torch tensors, changed in place; they travel over phalanx's object layer (see
phalanx.collective and docs/collectives.md), whatever `backend` says.

    import phalanx.util.collective as col
    col.init_collective_group(world_size=4, rank=r, backend="gloo", group_name="g")
    col.allreduce(grad, group_name="g")                 # sum over the 4 ranks, in place
    col.broadcast(weights, src_rank=0, group_name="g")
    col.send(x, dst_rank=1, group_name="g"); col.recv(y, src_rank=0, group_name="g")"""
import enum

from phalanx._private import collective_group as _g


class ReduceOp(enum.Enum):
    SUM = "sum"
    PRODUCT = "prod"
    MIN = "min"
    MAX = "max"


class Backend:
    """Ray's backend names (ray.util.collective.types.Backend); Backend("GLOO") is "gloo". Every one runs
    over phalanx's object layer."""
    NCCL = "nccl"
    MPI = "mpi"
    GLOO = "gloo"
    TORCH_GLOO = "torch_gloo"
    NIXL = "nixl"
    UNRECOGNIZED = "unrecognized"

    def __new__(cls, name):
        backend = getattr(cls, str(name).upper(), cls.UNRECOGNIZED)
        if backend == cls.UNRECOGNIZED:
            raise ValueError(f"Unrecognized backend: '{name}'")
        if backend == cls.MPI:
            raise RuntimeError("Ray does not support MPI backend.")
        return backend


_BACKENDS = ("nccl", "gloo", "torch_gloo", "phalanx", "auto")


def _op(op):
    if isinstance(op, ReduceOp):
        return op.value
    _g.check_op(op)
    return op


def init_collective_group(world_size, rank, backend="nccl", group_name="default", timeout=60.0):
    """Joins this process to `group_name` as `rank` of `world_size` (every
    rank calls it). The backend is phalanx's object layer whatever is named."""
    if str(backend).lower() not in _BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (expected one of {', '.join(_BACKENDS)})")
    _g.init_group(world_size, rank, group_name, timeout)


def create_collective_group(actors, world_size, ranks, backend="nccl", group_name="default"):
    """Ray's declarative form: each actor joins as the rank given for it. The
    actors must have a method `init_collective_group(world_size, rank,
    backend, group_name)` that calls this module's init_collective_group;
    returns the refs of those calls (get them to know the group formed)."""
    if len(actors) != len(ranks) or len(actors) != world_size:
        raise ValueError(f"{len(actors)} actors, {len(ranks)} ranks and world_size {world_size} must all agree")
    return [a.init_collective_group.remote(world_size, r, backend, group_name) for a, r in zip(actors, ranks)]


def destroy_collective_group(group_name="default"):
    _g.destroy_group(group_name)


def is_group_initialized(group_name="default"):
    return group_name in _g._groups


def get_rank(group_name="default"):
    """This process's rank in the group, -1 if it is not in it (as Ray)."""
    g = _g._groups.get(group_name)
    return -1 if g is None else g.rank


def get_collective_group_size(group_name="default"):
    """The group's world size, -1 if this process is not in it."""
    g = _g._groups.get(group_name)
    return -1 if g is None else g.world_size


def allreduce(tensor, group_name="default", op=ReduceOp.SUM):
    _g.group_allreduce(tensor, _op(op), group_name)


def broadcast(tensor, src_rank=0, group_name="default"):
    _g.group_broadcast(tensor, src_rank, group_name)


def allgather(tensor_list, tensor, group_name="default"):
    _g.group_allgather(tensor_list, tensor, group_name)


def reducescatter(tensor, tensor_list, group_name="default", op=ReduceOp.SUM):
    _g.group_reducescatter(tensor, tensor_list, _op(op), group_name)


def barrier(group_name="default"):
    _g.group_barrier(group_name)


def send(tensor, dst_rank, group_name="default"):
    _g.group_send(tensor, dst_rank, group_name)


def recv(tensor, src_rank, group_name="default"):
    _g.group_recv(tensor, src_rank, group_name)


def reduce(tensor, dst_rank=0, group_name="default", op=ReduceOp.SUM):
    """Ray's reduce: `tensor` on rank `dst_rank` becomes the reduction over the group; the other ranks'
    tensors stay as they were."""
    result = _copy(tensor)
    _g.group_allreduce(result, _op(op), group_name)
    if get_rank(group_name) == dst_rank:
        _assign(tensor, result)


def get_group_handle(group_name="default"):
    """The group this process joined as `group_name` (ValueError if it has not)."""
    g = _g._groups.get(group_name)
    if g is None:
        raise ValueError(f"this process is in no collective group named {group_name!r}: call "
                         "init_collective_group first")
    return g


def synchronize(gpu_id=0):
    """Waits for the work queued on GPU `gpu_id` (torch's CUDA stream); nothing to wait for without one."""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize(gpu_id)


def gloo_available():
    """Whether the "gloo" backend can be named: always (every backend runs over phalanx's object layer)."""
    return True


def nccl_available():
    """Whether this process can use NCCL (torch with a CUDA device, and the library)."""
    from phalanx._private import nccl
    try:
        nccl.check_available()
        return True
    except (RuntimeError, OSError):
        return False


def _copy(tensor):
    return tensor.clone() if hasattr(tensor, "clone") else tensor.copy()


def _assign(tensor, value):
    if hasattr(tensor, "copy_"):
        tensor.copy_(value)
    else:
        tensor[...] = value
