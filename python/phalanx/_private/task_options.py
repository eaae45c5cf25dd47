"""The helpers behind the options of tasks and actors (`.options()`,
`@phalanx.remote(...)`), shared by remote_function.py and actor.py: checks
of resource amounts, num_returns and retry options, the arguments' signature
check at the call, the hidden arguments the worker takes out, and encoding a
call's arguments (inline, or through the store when large)."""
import inspect
import math

import cloudpickle

from phalanx import _core, generator
from phalanx._private import serialization as ser
from phalanx.exceptions import SerializationError


class ArgumentChecker:
    """Checks the arguments of a .remote() call against the function's
    signature at the call, so a mistake is a TypeError in the caller (as in
    Ray), not a failed task later. A plain signature called with the right
    number of positional arguments costs one comparison."""
    __slots__ = ("_sig", "_name", "_fast")
    _DEFAULT = object()

    def __init__(self, fn, name, skip_self=False, _params=None):
        self._name = name
        self._sig = None
        self._fast = -1
        if _params is None:
            try:
                params = list(inspect.signature(fn).parameters.values())
            except (TypeError, ValueError):  # no signature to read (a builtin): no check
                return
            if skip_self and params and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                           inspect.Parameter.POSITIONAL_OR_KEYWORD):
                params = params[1:]
            _params = [(p.name, p.kind, p.default is not inspect.Parameter.empty) for p in params]
        self._sig = inspect.Signature([inspect.Parameter(n, k, default=self._DEFAULT if d else
                                                         inspect.Parameter.empty) for n, k, d in _params])
        if all(k == inspect.Parameter.POSITIONAL_OR_KEYWORD and not d for _, k, d in _params):
            self._fast = len(_params)

    def check(self, args, kwargs):
        if self._sig is None or (not kwargs and len(args) == self._fast):
            return
        try:
            self._sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self._name}.remote(): {e} (the function is {self._name}{self._sig})") from None

    def __reduce__(self):
        params = None if self._sig is None else [
            (p.name, p.kind, p.default is not inspect.Parameter.empty) for p in self._sig.parameters.values()]
        return (_rebuild_checker, (self._name, params))


def _rebuild_checker(name, params):
    if params is None:
        c = ArgumentChecker.__new__(ArgumentChecker)
        c._name, c._sig, c._fast = name, None, -1
        return c
    return ArgumentChecker(None, name, _params=params)


# What one task may ask for (the raylet checks the same: core/message_limits.h).
MAX_RETURNS = 10000
MAX_RESOURCE_AMOUNT = 1e12


def check_amount(what, v, name=None):
    """A resource amount: a finite number from 0 to MAX_RESOURCE_AMOUNT (not NaN, not infinity), on Ray's grid of
    1/10000; `name` is the resource as Ray's errors name it (default `what`). A wrong type is Ray's TypeError
    (phalanx's InvalidArgumentError, also a ValueError); a negative amount or one finer than the grid, Ray's
    ValueError and words."""
    name = name or what
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        from phalanx.exceptions import InvalidArgumentError
        raise InvalidArgumentError(f"The type of keyword '{name}' must be (<class 'float'>, <class 'int'>, "
                                   f"<class 'NoneType'>), but received type {type(v)}")
    if v < 0:
        raise ValueError(f"The quantity of resource {name} cannot be negative")
    if not math.isfinite(v) or not v <= MAX_RESOURCE_AMOUNT:
        raise ValueError(f"{what} must be a finite number from 0 to {MAX_RESOURCE_AMOUNT:g}, got {v!r}")
    if isinstance(v, float) and v != 0.0 and int(v * 10000) == 0:
        raise ValueError(f"The precision of the fractional quantity of resource {name} cannot go beyond 0.0001")


def check_num_returns(n):
    if n in ("streaming", "dynamic"):
        return
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_RETURNS:
        raise ValueError(f"num_returns must be an int from 0 to {MAX_RETURNS}, 'streaming' or 'dynamic', got {n!r}")


def generator_plan(fn, opts, where):
    """(generator mode, number of returns, backpressure) for a function's
    options: a function that yields streams unless num_returns says otherwise."""
    n = opts.get("num_returns", 1)
    if "num_returns" not in opts and generator.is_generator_function(fn):
        n = generator.STREAMING
    bp = opts.get("_generator_backpressure_num_objects")
    generator.check_generator_options(fn, n, bp, where)
    mode, count = generator.mode_code(n)
    return mode, count, max(bp or 0, 0)


def check_resource_options(opts, task=False):
    """Validates num_cpus, num_gpus, memory and resources; shared by tasks and actors (`task`: a task's, whose
    negative num_cpus, num_gpus and memory Ray's task options refuse in words of their own)."""
    if task:
        for key in ("num_cpus", "num_gpus", "memory"):
            v = opts.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise ValueError(f"The keyword '{key}' only accepts None, 0 or a positive number, got {v}.")
    if "num_cpus" in opts:
        check_amount("num_cpus", opts["num_cpus"])
    check_amount("num_gpus", opts.get("num_gpus", 0))
    check_amount("memory (bytes)", opts.get("memory", 0), "memory")
    res = opts.get("resources")
    if res is not None:
        if not isinstance(res, dict):
            raise ValueError(f"resources must be a dict of name -> amount, got {type(res).__name__}")
        for k, v in res.items():
            if not isinstance(k, str) or k in ("CPU", "GPU", "memory"):
                raise ValueError(f"resources key {k!r}: use num_cpus/num_gpus/memory for CPU, GPU and memory")
            if k == "bundle" or k.startswith("bundle_group_"):
                raise ValueError(f"resources key {k!r} is reserved for placement groups' bundles (as in Ray)")
            check_amount(f"resources[{k!r}]", v, k)
    accel = opts.get("accelerator_type")
    if accel is not None and (not isinstance(accel, str) or not accel):
        raise ValueError(f"accelerator_type must be an accelerator type name such as "
                         f"ray.util.accelerators.NVIDIA_TESLA_V100 ('V100'), got {accel!r}")


# Ray's unit-instance resources: a task takes a fraction of one device, or whole devices (given by id).
UNIT_INSTANCE_RESOURCES = ("GPU", "TPU", "neuron_cores", "NPU", "HPU")


def unit_instance_misfit(opts):
    """Why the options ask for more than one of a unit-instance resource in a fraction (num_gpus=1.5), or None.
    Raised at .remote(), as Ray's (a decorator with such options is taken)."""
    asks = dict(opts.get("resources") or {})
    if opts.get("num_gpus"):
        asks["GPU"] = opts["num_gpus"]
    for name in UNIT_INSTANCE_RESOURCES:
        v = asks.get(name)
        if isinstance(v, (int, float)) and v > 1 and v != int(v):
            what = "num_gpus" if name == "GPU" else f"resources[{name!r}]"
            return (f"{what} is {v!r}: {name} is a unit-instance resource, taken as a fraction of one device or "
                    f"as whole devices (as in Ray)")
    return None


def resource_map(opts):
    """The TaskSpec resources map (everything but CPU) for validated options."""
    out = {k: float(v) for k, v in (opts.get("resources") or {}).items() if v > 0}
    if opts.get("num_gpus"):
        out["GPU"] = float(opts["num_gpus"])
    if int(opts.get("memory") or 0):  # (whole bytes, rounded down, as Ray's)
        out["memory"] = float(int(opts["memory"]))
    if opts.get("accelerator_type"):  # (Ray's: a sliver of the resource a node of that type offers)
        out[ACCELERATOR_PREFIX + opts["accelerator_type"]] = 0.001
    return out


ACCELERATOR_PREFIX = "accelerator_type:"


def check_retry_exceptions(value):
    """Ray's retry_exceptions: a bool, or a list (tuple) of exception classes to retry."""
    if isinstance(value, bool):
        return
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(c, type) and issubclass(c, BaseException) for c in value):
        return
    raise TypeError(f"retry_exceptions must be a bool or a list of exception classes, got {value!r}")


# A hidden keyword argument of a task with retry_exceptions: (max_retries, True or the classes); the
# worker takes it out and runs the function again on those exceptions (_private/worker.py).
RETRY_ARG = "\x00phalanx_retry"


# A hidden keyword argument of a task with max_calls=N (Ray's option): its worker exits after running
# the function N times, which frees what the function leaked (GPU memory, threads).
MAX_CALLS_ARG = "\x00phalanx_max_calls"


def retry_arg(max_retries, exceptions):
    payload = cloudpickle.dumps((max_retries, True if exceptions is True else tuple(exceptions)))
    return (RETRY_ARG, None, _core.pack(0, payload, []))


def encode_arg(value, keyword, position, fn_name, inline_limit, holders):
    """(keyword, object id or None, inline bytes or None), and the ids it contains."""
    if isinstance(value, _core.ObjectRef):
        return (keyword, value.binary(), None), ()
    try:
        meta, bufs, contained = ser.serialize(value)  # (plain values without cloudpickle)
    except Exception as e:
        what = f"keyword argument '{keyword}'" if keyword else f"argument {position}"
        raise SerializationError(f"{what} of {fn_name} ({type(value).__name__}) cannot be pickled: "
                                 f"{type(e).__name__}: {e}") from e
    if _core.packed_size(meta, bufs) > inline_limit:
        # Large arguments go through the store once instead of riding in the task.
        oid = _core.next_put_id()
        _core.put_serialized(oid, ser.kind_of(value), meta, bufs, contained, True)
        holders.append(_core.adopt_ref(oid))  # held until the task has been submitted
        return (keyword, oid, None), ()
    return (keyword, None, _core.pack(ser.kind_of(value), meta, bufs)), contained


def encode_args(args, kwargs, fn_name, limit):
    """Encoded positional and keyword arguments, the ids nested in them, and the
    refs of large arguments put on the way (keep them until the submit)."""
    holders, encoded, contained = [], [], []
    for i, a in enumerate(args):
        e, c = encode_arg(a, "", i, fn_name, limit, holders)
        encoded.append(e)
        contained.extend(c)
    for k, v in kwargs.items():
        e, c = encode_arg(v, k, None, fn_name, limit, holders)
        encoded.append(e)
        contained.extend(c)
    return encoded, contained, holders
