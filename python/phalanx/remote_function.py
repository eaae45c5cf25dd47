"""@phalanx.remote on functions: RemoteFunction and its .remote()/.options()."""
import hashlib
import inspect
import pickle

from phalanx import _core, generator
from phalanx._private import api, runtime_env
from phalanx._private import serialization as ser
from phalanx._private.label_strategy import NodeLabelSchedulingStrategy, label_args
from phalanx._private.task_options import (ArgumentChecker, check_num_returns, check_resource_options,
                                           check_retry_exceptions, encode_args, generator_plan, resource_map,
                                           retry_arg, unit_instance_misfit, MAX_CALLS_ARG)
from phalanx.exceptions import OufOfBandObjectRefSerializationException, SerializationError
from phalanx.util.placement_group import PlacementGroupSchedulingStrategy, bundle_misfit, ray_resources

_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "num_returns", "max_retries", "name",
            "scheduling_strategy", "_generator_backpressure_num_objects", "placement_group",
            "placement_group_bundle_index", "placement_group_capture_child_tasks", "retry_exceptions", "max_calls",
            "runtime_env", "accelerator_type", "enable_task_events",  # (the timeline records tasks either way)
            "label_selector", "fallback_strategy",
            "object_store_memory"}  # (Ray's option table has it; set, it is refused below, as Ray refuses it)
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


# `placement_group=None` given: the default strategy, outside any group the submitter captures children in.
NO_PLACEMENT_GROUP = PlacementGroupSchedulingStrategy(None)


def scheduling_strategy_of(opts):
    """The scheduling strategy of a set of options, with Ray's older
    `placement_group=` / `placement_group_bundle_index=` /
    `placement_group_capture_child_tasks=` spelling too."""
    pg = opts.get("placement_group")
    if pg is None or pg == "default":
        if opts.get("placement_group_bundle_index", -1) != -1:
            raise ValueError("If placement group is not set, the value of bundle index must be -1.")
        if "placement_group" in opts and pg is None and opts.get("scheduling_strategy") in (None, "DEFAULT"):
            return NO_PLACEMENT_GROUP  # (given as None: out of a group that captures its children, as Ray's)
        return opts.get("scheduling_strategy")
    if opts.get("scheduling_strategy") not in (None, "DEFAULT"):
        raise ValueError("give either scheduling_strategy or placement_group, not both")
    return PlacementGroupSchedulingStrategy(pg, opts.get("placement_group_bundle_index", -1),
                                            opts.get("placement_group_capture_child_tasks"))


def strategy_args(strategy):
    """(strategy code, affinity node or placement group id, soft, bundle index) for submit_task."""
    if strategy is None:
        return 0, b"", False, -1
    if strategy == "DEFAULT":  # (given: as Ray's, not captured into its submitter's placement group either)
        return 512, b"", False, -1  # (the binding's kNoCaptureFlag)
    if strategy == "SPREAD":
        return 1, b"", False, -1
    if isinstance(strategy, NodeAffinitySchedulingStrategy):
        return 2, strategy.node_id, strategy.soft, -1
    if isinstance(strategy, NodeLabelSchedulingStrategy):  # (its labels go in label_args)
        return 0, b"", False, -1
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        if strategy.placement_group is None:  # (no group: not one its submitter captures its children in either)
            return 512, b"", False, -1  # (the binding's kNoCaptureFlag)
        capture = 256 if strategy.placement_group_capture_child_tasks else 0  # (the binding's kCaptureFlag)
        return 3 | capture, strategy.placement_group.id, False, strategy.placement_group_bundle_index
    raise ValueError(f"scheduling_strategy must be 'DEFAULT', 'SPREAD', a NodeAffinitySchedulingStrategy, a "
                     f"NodeLabelSchedulingStrategy or a PlacementGroupSchedulingStrategy, got {strategy!r}")
def _check_options(opts, where):
    unknown = set(opts) - _OPTIONS
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for {where}; "
                         f"valid ones are {sorted(_OPTIONS)}")
    check_resource_options(opts, task=True)
    if opts.get("object_store_memory") is not None:
        raise ValueError("Setting 'object_store_memory' is not implemented for tasks")
    if opts.get("enable_task_events") is not None and not isinstance(opts["enable_task_events"], bool):
        raise ValueError(f"enable_task_events must be a bool, got {opts['enable_task_events']!r}")
    strategy_args(scheduling_strategy_of(opts))
    label_args(opts, scheduling_strategy_of(opts))
    if "num_returns" in opts:
        check_num_returns(opts["num_returns"])
    if "max_retries" in opts and (not isinstance(opts["max_retries"], int) or opts["max_retries"] < -1):
        raise ValueError(f"max_retries must be an int >= -1, got {opts['max_retries']!r}")
    if "retry_exceptions" in opts:
        check_retry_exceptions(opts["retry_exceptions"])
    if "max_calls" in opts and (type(opts["max_calls"]) is not int or opts["max_calls"] < 0):
        raise ValueError(f"max_calls must be an int >= 0 (0: no limit), got {opts['max_calls']!r}")
    runtime_env.check(opts.get("runtime_env"), where)


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
        # Ray's __ray_invocation_decorator__: wraps the submission, `decorator(invoke)(args, kwargs)`
        self._decorator = getattr(fn, "__ray_invocation_decorator__", None)
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
        self._bundle_misfit = unit_instance_misfit(self._options) or bundle_misfit(  # (raised at .remote(), as Ray's)
            scheduling_strategy_of(self._options), ray_resources(self._options, self._options["num_cpus"]), {},
            self._fn.__qualname__)
        strategy, node, soft, bundle = strategy_args(scheduling_strategy_of(self._options))
        self._submit_kw = {"resources": resource_map(self._options), "strategy": strategy, "affinity_node": node,
                           "affinity_soft": soft}
        if strategy == 3:
            self._submit_kw["bundle_index"] = bundle
        labels = label_args(self._options, scheduling_strategy_of(self._options))
        if labels:
            self._submit_kw["labels"] = labels
        if self._generator[0]:
            self._submit_kw.update(generator=self._generator[0], backpressure=self._generator[2])
        self._env = self._options.get("runtime_env") or None
        self._env_cache = None  # (the environment it was resolved over, the packed result)

    def _packed_env(self):
        """This function's runtime environment over the submitter's, its packages uploaded (once per
        submitter's environment)."""
        base = runtime_env.current
        if self._env is None:
            return base
        cache = self._env_cache
        if cache is None or cache[0] != base:
            cache = self._env_cache = (base, runtime_env.resolve(self._env, base))
        return cache[1]

    def _ensure_registered(self):
        if self._function_id is None:
            try:
                self._pickled = ser.dumps_function(self._fn)
            except OufOfBandObjectRefSerializationException:
                raise  # (Ray's own error for a ref in the closure, as Ray raises it)
            except Exception as e:
                raise SerializationError(f"remote function {self._name} cannot be pickled: "
                                         f"{type(e).__name__}: {e}") from e
            self._function_id = hashlib.blake2b(self._pickled, digest_size=16).digest()
        # Per process and per id only once (the core remembers).
        _core.register_function(self._function_id, self._name, self._pickled)

    def bind(self, *args, **kwargs):
        """A node of a call graph calling this task (phalanx.dag; compiled graphs take actor methods only)."""
        self._checker.check(args, kwargs)
        from phalanx.dag.nodes import FunctionNode
        return FunctionNode(self, args, kwargs)

    def remote(self, *args, **kwargs):
        if self._decorator is not None:
            return self._decorator(self._invoke)(args, kwargs)
        return self._invoke(args, kwargs)

    def _invoke(self, args, kwargs):
        self._checker.check(args, kwargs)
        if self._bundle_misfit:
            raise ValueError(self._bundle_misfit)
        api.ensure_initialized()
        self._ensure_registered()
        opts = self._options
        encoded, contained, holders = encode_args(args, kwargs, self._name, api.inline_limit())
        retries = opts["max_retries"]
        if opts.get("retry_exceptions") and retries != 0:
            encoded.append(retry_arg(1 << 30 if retries == -1 else retries, opts["retry_exceptions"]))
        if opts.get("max_calls"):
            encoded.append((MAX_CALLS_ARG, None, _core.pack(0, pickle.dumps(opts["max_calls"]), [])))
        mode, n, backpressure = self._generator
        kw = self._submit_kw
        if self._env is not None or runtime_env.current:
            kw = dict(kw, runtime_env=self._packed_env())
        refs = _core.submit_task(self._function_id, self._name, encoded, n, float(opts["num_cpus"]),
                                 1 << 30 if retries == -1 else retries, contained, **kw)
        if mode:
            return generator.wrap(refs, mode, backpressure)
        if n == 1:
            return refs[0]
        if n == 0:
            return None
        return refs
