"""Collectives over objects: reduce, allreduce and gather of numpy arrays that
may still be futures.

    grads = [sim.gradient.remote(policy_ref) for sim in simulators]
    total = phalanx.collective.reduce(grads, op="sum")          # a ref, at once
    some = phalanx.collective.reduce(grads, op="sum", num_objects=4)
    phalanx.collective.reduced_inputs(some)                     # the 4 that went in

The raylet of the calling process combines the arrays itself (no Python, no
pickling), in the order they become ready: each input is added as soon as it
exists, so the reduce finishes shortly after the last input it needs.
Inputs must be C-contiguous numpy arrays or CPU torch tensors of one numeric
dtype and shape (float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64);
anything else fails the result with a CollectiveError naming the inputs.
The result is of the inputs' kind: a tensor for tensors. GPU objects
(CUDA tensors put or returned by GPU processes) are combined on the calling
process's GPU instead (phalanx/_private/gpu_reduce.py). See
docs/collectives.md and docs/gpu.md.

Actors that know their peers can form a static group instead, as with Ray's
collective library: `init_group(world_size, rank, group_name)`, then in-place
`allreduce(array)`, `broadcast(array, src_rank)`, `allgather(list, array)`,
`reducescatter(array, list)`, `barrier()`.
"""
import sys

import numpy as np

from phalanx import _core
from phalanx._private import collective_group as _group
from phalanx._private import gpu_objects as _gpu_objects
from phalanx._private import gpu_reduce as _gpu_reduce
from phalanx._private import tensors as _tensors
from phalanx._private.collective_group import destroy_group, init_group
from phalanx._private.api import ensure_initialized, get, wait
from phalanx.exceptions import GetTimeoutError

OPS = _group.OPS


def _check_refs(refs, what):
    if isinstance(refs, _core.ObjectRef) or not hasattr(refs, "__iter__"):
        raise TypeError(f"{what}() takes a list of ObjectRefs, got {type(refs).__name__}")
    refs = list(refs)
    if not refs:
        raise ValueError(f"{what}() of an empty list")
    for i, r in enumerate(refs):
        if not isinstance(r, _core.ObjectRef):
            raise TypeError(f"{what}() input {i} is a {type(r).__name__}, not an ObjectRef "
                            "(phalanx.put it, or pass the ref a task returned)")
    return refs


def _reduce_timeout_ms(timeout):
    if timeout is None:
        return 0
    if timeout <= 0:
        raise ValueError(f"timeout must be positive or None, got {timeout}")
    return max(1, int(timeout * 1000))


def reduce(refs, op="sum", num_objects=None, timeout=None, device=None):
    """A ref to op(inputs) element-wise, returned at once.

    `num_objects=k` combines the first k inputs to be ready and leaves the rest
    alone (see `reduced_inputs`); an input whose task failed is skipped while
    enough others remain. With `timeout` (seconds) the result fails with a
    GetTimeoutError naming the inputs still missing; `get` of a failed result
    raises CollectiveError (mismatched inputs, too many failures).

    Where it runs: the raylets combine host arrays (numpy, CPU tensors, and
    CUDA tensors' staged bytes) along a tree of the inputs' nodes. GPU
    objects (CUDA tensors put or returned by GPU processes, docs/gpu.md) are
    combined on this process's GPU instead, each mapped or copied onto it as
    it arrives, the result a GPU object: when an input already here is one,
    or with `device="cuda"` / `"cuda:N"` (inputs still futures). `device="cpu"`
    keeps it on the raylets."""
    ensure_initialized()
    refs = _check_refs(refs, "reduce")
    _group.check_op(op)
    k = len(refs) if num_objects is None else num_objects
    if not isinstance(k, int) or not 1 <= k <= len(refs):
        raise ValueError(f"num_objects must be between 1 and {len(refs)} (the number of inputs), got {num_objects}")
    oid = _core.next_put_id()
    index = _gpu_index(refs, device)
    if index is not None:
        ref = _core.ObjectRef(oid)  # (held here; the GPU reduce puts the value)
        _gpu_reduce.start(oid, refs, op, k, timeout, index)
        return ref
    _core.reduce(oid, [r.binary() for r in refs], op, k, _reduce_timeout_ms(timeout))
    return _core.adopt_ref(oid)


def _gpu_index(refs, device):
    """The GPU of this process a reduce runs on, or None: the raylets'."""
    if device is not None:
        device = _tensors.parse_device(device)
        if device == "cpu":
            return None
        api = _gpu_objects.device()
        if api is None:
            raise ValueError(f"reduce(device={device!r}): this process has no GPU for GPU objects "
                             f"(torch.cuda.is_available() is False, or {_gpu_objects.ENV_SWITCH}=0)")
        return api.current() if device == "cuda" else int(device.partition(":")[2])
    api = _gpu_objects.device() if "torch" in sys.modules else None
    return api.current() if api is not None and _gpu_reduce.any_ready_gpu_object(refs) else None


def reduced_inputs(ref, timeout=None):
    """The input refs that went into a `reduce` result, in the order they were
    combined. Waits for the reduce to finish (raises GetTimeoutError after
    `timeout` s); works in the process that called reduce, or on its node."""
    ensure_initialized()
    if not isinstance(ref, _core.ObjectRef):
        raise TypeError(f"reduced_inputs() takes the ObjectRef reduce returned, got {type(ref).__name__}")
    on_gpu = _gpu_reduce.inputs_of(ref.binary(), timeout)
    if on_gpu is not None:
        return on_gpu
    ready, _ = wait([ref], timeout=timeout)
    if not ready:
        raise GetTimeoutError(f"reduced_inputs: the reduce {ref!r} did not finish within {timeout} s")
    return [_core.ObjectRef(i) for i in _core.reduced_inputs(ref.binary(), 10000)]


def allreduce(refs, op="sum", timeout=None, group_name="default"):
    """op(inputs) for every input, returned at once: a list with one ref per
    input, to a copy of the reduced array made on that input's node (a task
    there reads it from its own node's store). Large arrays are reduced as
    reduce-scatter + allgather over the inputs' nodes while the inputs are
    still arriving; small ones on the caller's node. With `timeout`
    (seconds) the results fail with a GetTimeoutError naming what was
    missing; mismatched or failed inputs fail every result with the reason.

    Given a numpy array or a CPU torch tensor instead (a member of a static
    group, see init_group): reduces it in place with the same array of
    every rank."""
    if isinstance(refs, np.ndarray) or _group._is_tensor(refs):
        return _group.group_allreduce(refs, op, group_name, timeout)
    ensure_initialized()
    refs = _check_refs(refs, "allreduce")
    _group.check_op(op)
    outs = [_core.next_put_id() for _ in refs]
    _core.allreduce(outs, [r.binary() for r in refs], op, _reduce_timeout_ms(timeout))
    return [_core.adopt_ref(o) for o in outs]


def gather(refs, timeout=None):
    """The values of `refs`, fetched in parallel (one request for all)."""
    refs = _check_refs(refs, "gather")
    return get(refs, timeout=timeout)


# Static groups (see init_group): in place, on numpy arrays and CPU tensors.
broadcast = _group.group_broadcast
allgather = _group.group_allgather
reducescatter = _group.group_reducescatter
barrier = _group.group_barrier

__all__ = ["reduce", "reduced_inputs", "allreduce", "gather", "OPS", "init_group", "destroy_group", "broadcast",
           "allgather", "reducescatter", "barrier"]
