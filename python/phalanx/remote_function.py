"""@phalanx.remote on functions: RemoteFunction and its .remote()/.options()."""
import hashlib
import inspect
import math

import pickle

import cloudpickle

from phalanx import _core
from phalanx._private import serialization as ser
from phalanx.exceptions import SerializationError

_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "num_returns", "max_retries", "name",
            "scheduling_strategy", "_generator_backpressure_num_objects", "placement_group",
            "placement_group_bundle_index", "placement_group_capture_child_tasks", "retry_exceptions", "max_calls"}
_DEFAULTS = {"num_cpus": 1.0, "num_gpus": 0, "memory": 0, "resources": None, "num_returns": 1, "max_retries": 3,
             "scheduling_strategy": None}


class NodeAffinitySchedulingStrategy:
    """Run on one node (its id as hex, see phalanx.nodes()). soft=True falls
    back to anywhere when that node is gone; otherwise the task fails."""

    def __init__(self, node_id, soft=False):
        try:
            self.node_id = bytes.fromhex(node_id)
        except (TypeError, ValueError):
            raise ValueError(f"node_id must be a node id in hex, got {node_id!r}") from None
        self.soft = bool(soft)


def scheduling_strategy_of(opts):
    """The scheduling strategy of a set of options, with Ray's older
    `placement_group=` / `placement_group_bundle_index=` /
    `placement_group_capture_child_tasks=` spelling too."""
    pg = opts.get("placement_group")
    if pg is None or pg == "default":
        return opts.get("scheduling_strategy")
    if opts.get("scheduling_strategy") not in (None, "DEFAULT"):
        raise ValueError("give either scheduling_strategy or placement_group, not both")
    from phalanx.util.placement_group import PlacementGroupSchedulingStrategy
    return PlacementGroupSchedulingStrategy(pg, opts.get("placement_group_bundle_index", -1),
                                            opts.get("placement_group_capture_child_tasks"))


def strategy_args(strategy):
    """(strategy code, affinity node or placement group id, soft, bundle index) for submit_task."""
    if strategy in (None, "DEFAULT"):
        return 0, b"", False, -1
    if strategy == "SPREAD":
        return 1, b"", False, -1
    if isinstance(strategy, NodeAffinitySchedulingStrategy):
        return 2, strategy.node_id, strategy.soft, -1
    from phalanx.util.placement_group import PlacementGroupSchedulingStrategy
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        if strategy.placement_group is None:
            return 0, b"", False, -1
        capture = 256 if strategy.placement_group_capture_child_tasks else 0  # (the binding's kCaptureFlag)
        return 3 | capture, strategy.placement_group.id, False, strategy.placement_group_bundle_index
    raise ValueError(f"scheduling_strategy must be 'DEFAULT', 'SPREAD', a NodeAffinitySchedulingStrategy or a "
                     f"PlacementGroupSchedulingStrategy, got {strategy!r}")
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


def check_amount(what, v):
    """A resource amount: a finite number from 0 to MAX_RESOURCE_AMOUNT (not NaN, not infinity)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not \
            0 <= v <= MAX_RESOURCE_AMOUNT:
        raise ValueError(f"{what} must be a finite number from 0 to {MAX_RESOURCE_AMOUNT:g}, got {v!r}")


def check_num_returns(n):
    if n in ("streaming", "dynamic"):
        return
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_RETURNS:
        raise ValueError(f"num_returns must be an int from 0 to {MAX_RETURNS}, 'streaming' or 'dynamic', got {n!r}")


def generator_plan(fn, opts, where):
    """(generator mode, number of returns, backpressure) for a function's
    options: a function that yields streams unless num_returns says otherwise."""
    from phalanx import generator
    n = opts.get("num_returns", 1)
    if "num_returns" not in opts and generator.is_generator_function(fn):
        n = generator.STREAMING
    bp = opts.get("_generator_backpressure_num_objects")
    generator.check_generator_options(fn, n, bp, where)
    mode, count = generator.mode_code(n)
    return mode, count, max(bp or 0, 0)


def check_resource_options(opts):
    """Validates num_cpus, num_gpus, memory and resources; shared by tasks and actors."""
    if "num_cpus" in opts:
        check_amount("num_cpus", opts["num_cpus"])
    g = opts.get("num_gpus", 0)
    check_amount("num_gpus", g)
    if g > 1 and g != int(g):
        raise ValueError(f"num_gpus must be a fraction below 1 or a whole number, got {g!r}")
    check_amount("memory (bytes)", opts.get("memory", 0))
    res = opts.get("resources")
    if res is not None:
        if not isinstance(res, dict):
            raise ValueError(f"resources must be a dict of name -> amount, got {type(res).__name__}")
        for k, v in res.items():
            if not isinstance(k, str) or k in ("CPU", "GPU", "memory"):
                raise ValueError(f"resources key {k!r}: use num_cpus/num_gpus/memory for CPU, GPU and memory")
            if k == "bundle" or k.startswith("bundle_group_"):
                raise ValueError(f"resources key {k!r} is reserved for placement groups' bundles (as in Ray)")
            check_amount(f"resources[{k!r}]", v)


def resource_map(opts):
    """The TaskSpec resources map (everything but CPU) for validated options."""
    out = {k: float(v) for k, v in (opts.get("resources") or {}).items() if v > 0}
    if opts.get("num_gpus"):
        out["GPU"] = float(opts["num_gpus"])
    if opts.get("memory"):
        out["memory"] = float(opts["memory"])
    return out


def _check_options(opts, where):
    unknown = set(opts) - _OPTIONS
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for {where}; "
                         f"valid ones are {sorted(_OPTIONS)}")
    check_resource_options(opts)
    strategy_args(scheduling_strategy_of(opts))
    if "num_returns" in opts:
        check_num_returns(opts["num_returns"])
    if "max_retries" in opts and (not isinstance(opts["max_retries"], int) or opts["max_retries"] < -1):
        raise ValueError(f"max_retries must be an int >= -1, got {opts['max_retries']!r}")
    if "retry_exceptions" in opts:
        check_retry_exceptions(opts["retry_exceptions"])
    if "max_calls" in opts and (type(opts["max_calls"]) is not int or opts["max_calls"] < 0):
        raise ValueError(f"max_calls must be an int >= 0 (0: no limit), got {opts['max_calls']!r}")


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


class RemoteFunction:
    """A function that runs as a task on a worker. Call `.remote(*args)` to
    submit it; the result is an ObjectRef (a list of them for num_returns > 1)."""

    def __init__(self, fn, options):
        _check_options(options, f"@phalanx.remote on {fn.__qualname__}")
        if inspect.iscoroutinefunction(fn):
            # (Ray's words first, as Ray's tests match them)
            raise ValueError(f"'async def' should not be used for remote tasks: {fn.__qualname__} is a coroutine "
                             "function. Make it an async actor's method (an event loop runs its calls), or wrap "
                             "it in a plain function that calls asyncio.run(...)")
        self._fn = fn
        self._name = options.get("name") or f"{fn.__module__}.{fn.__qualname__}"
        self._given = dict(options)  # (what the user said, defaults aside: a generator streams by default)
        self._options = dict(_DEFAULTS, **options)
        self._plan(f"@phalanx.remote on {fn.__qualname__}")
        self._pickled = None
        self._function_id = None
        self._checker = ArgumentChecker(fn, self._name)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "remote_function")

    def __call__(self, *args, **kwargs):
        raise TypeError(f"remote function {self._name} cannot be called directly; "
                        f"use {self.__name__}.remote(...)")

    def options(self, **options):
        """A copy with some options changed (num_cpus, num_gpus, memory, resources,
        num_returns, max_retries, name)."""
        _check_options(options, f"{self._name}.options()")
        merged = dict(self._options, **options)
        clone = RemoteFunction.__new__(RemoteFunction)
        clone.__dict__.update(self.__dict__)
        clone._given = dict(self._given, **options)
        clone._options = merged
        clone._name = merged.get("name") or self._name
        clone._plan(f"{self._name}.options()")
        return clone

    def _plan(self, where):
        """What every .remote() passes on, worked out once per set of options:
        (generator mode, number of returns, backpressure) and submit_task's keywords."""
        self._generator = generator_plan(self._fn, self._given, where)
        strategy, node, soft, bundle = strategy_args(scheduling_strategy_of(self._options))
        self._submit_kw = {"resources": resource_map(self._options), "strategy": strategy, "affinity_node": node,
                           "affinity_soft": soft}
        if strategy == 3:
            self._submit_kw["bundle_index"] = bundle
        if self._generator[0]:
            self._submit_kw.update(generator=self._generator[0], backpressure=self._generator[2])

    def _ensure_registered(self):
        if self._function_id is None:
            try:
                self._pickled = ser.dumps_function(self._fn)
            except Exception as e:
                raise SerializationError(f"remote function {self._name} cannot be pickled: "
                                         f"{type(e).__name__}: {e}") from e
            self._function_id = hashlib.blake2b(self._pickled, digest_size=16).digest()
        # Per process and per id only once (the core remembers).
        _core.register_function(self._function_id, self._name, self._pickled)

    def remote(self, *args, **kwargs):
        from phalanx._private.api import ensure_initialized, inline_limit
        self._checker.check(args, kwargs)
        ensure_initialized()
        self._ensure_registered()
        opts = self._options
        encoded, contained, holders = encode_args(args, kwargs, self._name, inline_limit())
        retries = opts["max_retries"]
        if opts.get("retry_exceptions") and retries != 0:
            encoded.append(retry_arg(1 << 30 if retries == -1 else retries, opts["retry_exceptions"]))
        if opts.get("max_calls"):
            encoded.append((MAX_CALLS_ARG, None, _core.pack(0, pickle.dumps(opts["max_calls"]), [])))
        mode, n, backpressure = self._generator
        refs = _core.submit_task(self._function_id, self._name, encoded, n, float(opts["num_cpus"]),
                                 1 << 30 if retries == -1 else retries, contained, **self._submit_kw)
        if mode:
            from phalanx.generator import wrap
            return wrap(refs, mode, backpressure)
        if n == 1:
            return refs[0]
        if n == 0:
            return None
        return refs
