"""@phalanx.remote on classes: actors.

    @phalanx.remote(num_cpus=1, max_restarts=2, max_task_retries=1)
    class Learner:
        def __init__(self, lr): ...
        def step(self, batch): ...

    learner = Learner.options(name="learner").remote(0.01)
    refs = [learner.step.remote(b) for b in batches]     # run in submission order
    same = phalanx.get_actor("learner")
    phalanx.kill(learner)

An actor runs in a worker process of its own and keeps its state between
calls. Calls from one caller run in the order they were made, one at a
time, unless the actor says otherwise:

    @phalanx.remote(max_concurrency=8)                       # 8 calls at once, on threads
    @phalanx.remote(concurrency_groups={"io": 2, "compute": 4})
    class A:
        @phalanx.method(concurrency_group="io")
        def read(self): ...
        async def fetch(self): ...                           # any async def: an asyncio actor

An actor with an `async def` method runs every call on one event loop, up
to max_concurrency (default 1000) at once; `await ref` works inside."""
import warnings
import functools
import hashlib
import inspect
import os
import time

import cloudpickle

from phalanx import _core, generator
from phalanx._private import actor_lifetime, api, runtime_env, state
from phalanx._private import serialization as ser
from phalanx.exceptions import (ActorDiedError, InvalidArgumentError, NotFoundError,
                                PendingCallsLimitExceededError, PhalanxError, SerializationError)
from phalanx._private.task_options import (ArgumentChecker, check_num_returns, check_resource_options,
                                           check_retry_exceptions, encode_args, generator_plan, resource_map,
                                           retry_arg, unit_instance_misfit)
from phalanx._private.label_strategy import label_args
from phalanx.remote_function import scheduling_strategy_of, strategy_args
from phalanx.util.placement_group import bundle_misfit, ray_resources

_ACTOR_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "max_restarts", "max_task_retries", "name",
                  "lifetime", "namespace", "get_if_exists", "max_concurrency", "concurrency_groups",
                  "max_pending_calls", "scheduling_strategy", "placement_group", "placement_group_bundle_index",
                  "placement_group_capture_child_tasks", "checkpoint_interval_s", "runtime_env", "accelerator_type",
                  # Ray's: calls taken as their arguments are ready (also a sync actor's); task events (the
                  # timeline records calls either way); GPU tensors by reference (accepted: gpu_objects.py)
                  "allow_out_of_order_execution", "enable_task_events", "enable_tensor_transport",
                  "label_selector", "fallback_strategy",
                  "object_store_memory"}  # (Ray's: deprecated for actors, reserves nothing; warned of, ignored)
_ACTOR_DEFAULTS = {"num_cpus": 0, "num_gpus": 0, "memory": 0, "resources": None, "max_restarts": 0,
                   "max_task_retries": 0, "name": None, "lifetime": None, "namespace": None,
                   "get_if_exists": False, "max_concurrency": None, "concurrency_groups": None,
                   "max_pending_calls": -1, "scheduling_strategy": None, "checkpoint_interval_s": None}
_KIND_CREATION = 1
_KIND_METHOD = 2


def _strategy_kw(opts):
    """submit_task's keywords for the actor's scheduling strategy."""
    strategy, node, soft, bundle = strategy_args(scheduling_strategy_of(opts))
    kw = {"strategy": strategy, "affinity_node": node, "affinity_soft": soft, "bundle_index": bundle}
    labels = label_args(opts, scheduling_strategy_of(opts))
    if labels:
        kw["labels"] = labels
    return kw
# A hidden keyword argument of a creation (how the actor runs its calls) or
# of a call (.options(concurrency_group=)); the worker takes it out.
CONCURRENCY_ARG = "\x00phalanx_concurrency"


def _hidden_arg(value):
    """The encoded CONCURRENCY_ARG argument carrying `value`."""
    import pickle
    return (CONCURRENCY_ARG, None, _core.pack(0, pickle.dumps(value, protocol=5), []))


def method(num_returns=None, concurrency_group=None, _generator_backpressure_num_objects=None,
           enable_task_events=None, tensor_transport=None, retry_exceptions=None, max_task_retries=None):
    """Declares how many values an actor method returns (a method that
    yields: "streaming" unless said otherwise), the concurrency group it runs
    in, and a generator's backpressure: `@phalanx.method(num_returns=2)`,
    `@phalanx.method(concurrency_group="io")`. Ray's `enable_task_events`
    (phalanx's timeline records every call) and `tensor_transport` (a hint:
    phalanx picks how tensors travel) are accepted so Ray programs run.
    `retry_exceptions` (True or exception classes) runs a call again when it raises one, up to
    `max_task_retries` times (default: the actor's max_task_retries), as Ray's."""
    retry = _retry_option(max_task_retries, retry_exceptions)
    if enable_task_events is not None and not isinstance(enable_task_events, bool):
        raise ValueError(f"enable_task_events must be a bool, got {enable_task_events!r}")
    if num_returns is not None:
        check_num_returns(num_returns)
    if concurrency_group is not None and (not isinstance(concurrency_group, str) or not concurrency_group):
        raise ValueError(f"concurrency_group must be a group name (a non-empty string), got {concurrency_group!r}")

    def mark(fn):
        given = {} if num_returns is None else {"num_returns": num_returns}
        if _generator_backpressure_num_objects is not None:
            given["_generator_backpressure_num_objects"] = _generator_backpressure_num_objects
        generator_plan(fn, given, f"@phalanx.method on {getattr(fn, '__qualname__', fn)}")  # (checks it)
        fn.__phalanx_method_options__ = given
        if concurrency_group is not None:
            fn.__phalanx_concurrency_group__ = concurrency_group
        if retry is not None:
            fn.__phalanx_retry__ = retry
        return fn
    return mark


def _retry_option(max_task_retries, retry_exceptions):
    """(max_task_retries or None, retry_exceptions) from a method's options, checked; None if no retries."""
    if max_task_retries is not None and (type(max_task_retries) is not int or max_task_retries < -1):
        raise ValueError(f"max_task_retries must be an int >= -1, got {max_task_retries!r}")
    if retry_exceptions is None:
        return None if max_task_retries is None else (max_task_retries, False)
    check_retry_exceptions(retry_exceptions)
    return (max_task_retries, retry_exceptions)


current_namespace = api.current_namespace  # (the namespace of the job this process works for)


def _qualified(name, namespace):
    return f"{namespace or current_namespace()}/{name}"


def _asks_resources(options):
    """Whether options given to an actor class ask for resources (Ray: memory aside); if not, Ray creates the
    actor with 1 CPU and runs it with none."""
    return any(options.get(k) for k in ("num_cpus", "num_gpus", "resources", "accelerator_type")) or \
        options.get("num_cpus") == 0


def _check_actor_options(opts, where):
    unknown = set(opts) - _ACTOR_OPTIONS
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for {where}; valid ones are {sorted(_ACTOR_OPTIONS)}")
    for key in ("max_restarts", "max_task_retries"):
        if key in opts and (not isinstance(opts[key], int) or opts[key] < -1):
            raise ValueError(f"{key} must be an int >= -1 (-1: no limit), got {opts[key]!r}")
    check_resource_options(opts)
    if opts.get("object_store_memory") is not None:
        osm = opts["object_store_memory"]
        if not isinstance(osm, int):
            raise TypeError(f"The type of keyword 'object_store_memory' must be (<class 'int'>, <class 'NoneType'>), "
                            f"but received type {type(osm)}")
        if osm < 0:
            raise ValueError("The keyword 'object_store_memory' only accepts None, 0 or a positive integer.")
        warnings.warn("Setting 'object_store_memory' for actors is deprecated since it doesn't actually reserve the "
                      "required object store memory. Use object spilling that's enabled by default instead to "
                      "bypass the object store memory size limitation.", DeprecationWarning, stacklevel=1)
    strategy_args(scheduling_strategy_of(opts))
    runtime_env.check(opts.get("runtime_env"), where)
    if opts.get("lifetime") not in (None, "detached", "non_detached"):
        raise ValueError(f"lifetime must be None, 'detached' or 'non_detached', got {opts['lifetime']!r}")
    if opts.get("name") is not None:  # (Ray's checks and words)
        if not isinstance(opts["name"], str):
            raise TypeError(f"name must be None or a string, got: '{type(opts['name'])}'.")
        if not opts["name"]:
            raise ValueError("Actor name cannot be an empty string.")
    if opts.get("get_if_exists") and opts.get("name") is None:
        raise ValueError("The actor name must be specified to use `get_if_exists`.")
    ns = opts.get("namespace")
    if ns is not None:
        if not isinstance(ns, str):
            raise TypeError("namespace must be None or a string.")
        if not ns:
            raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')
        if "/" in ns:
            raise ValueError(f"namespace must not contain '/' (phalanx joins it and the name with '/'), got {ns!r}")
    for flag in ("allow_out_of_order_execution", "enable_task_events", "enable_tensor_transport"):
        if opts.get(flag) is not None and not isinstance(opts[flag], bool):
            raise ValueError(f"{flag} must be a bool, got {opts[flag]!r}")
    mc = opts.get("max_concurrency")
    if mc is not None and (isinstance(mc, bool) or not isinstance(mc, int) or mc < 1):
        raise ValueError(f"max_concurrency must be an int >= 1, got {mc!r}")
    ci = opts.get("checkpoint_interval_s")
    if ci is not None and (isinstance(ci, bool) or not isinstance(ci, (int, float)) or not ci > 0):
        raise ValueError(f"checkpoint_interval_s must be a number of seconds > 0, got {ci!r}")
    mp = opts.get("max_pending_calls", -1)
    if isinstance(mp, bool) or not isinstance(mp, int) or (mp < 1 and mp != -1):
        raise ValueError(f"max_pending_calls must be an int >= 1, or -1 for no limit, got {mp!r}")
    groups = opts.get("concurrency_groups")
    if groups is not None:
        if not isinstance(groups, dict):
            raise ValueError(f"concurrency_groups must be a dict of group name -> max concurrency, got "
                             f"{type(groups).__name__}")
        for g, n in groups.items():
            if not isinstance(g, str) or not g:
                raise ValueError(f"concurrency group names must be non-empty strings, got {g!r}")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"concurrency group {g!r}: max concurrency must be an int >= 1, got {n!r}")


def _check_groups(cls, groups):
    """Every @phalanx.method(concurrency_group=...) names a group the class defines."""
    for name, member in inspect.getmembers(cls, predicate=callable):
        g = getattr(member, "__phalanx_concurrency_group__", None)
        if g is not None and g not in (groups or {}):
            raise ValueError(f"method {cls.__qualname__}.{name} runs in concurrency group {g!r}, which "
                             f"{cls.__qualname__} does not define; defined: {sorted(groups or {})} "
                             f"(@phalanx.remote(concurrency_groups={{{g!r}: N}}))")


class _MethodInfo:
    """A method's call plan: (generator mode, number of returns, backpressure),
    the options it was declared with, its argument checker, and its retries on
    exceptions: (max_task_retries or None for the actor's, retry_exceptions) or None."""
    __slots__ = ("plan", "given", "checker", "retry")

    def __init__(self, plan, given, checker, retry=None):
        self.plan = plan
        self.given = given
        self.checker = checker
        self.retry = retry

    def __reduce__(self):
        return (_MethodInfo, (self.plan, self.given, self.checker, self.retry))


# The method every checkpointing actor has: phalanx.checkpoint(actor) calls it.
SAVE_CHECKPOINT = "__phalanx_save_checkpoint__"


def _save_checkpoint_stub(self):
    """Takes a checkpoint now (__phalanx_checkpoint__, kept in the GCS); True."""


# The method every actor has for a compiled graph's loop (dag/loop.py's LOOP_METHOD).
DAG_LOOP = "__phalanx_dag_loop__"


def _dag_loop_stub(self, group, rank, world, program, timeout):
    """Runs this actor's part of a compiled graph until its teardown (phalanx.dag)."""


# Ray's methods of every actor: `__ray_ready__` (True once the actor is up) and `__ray_terminate__` (ends it
# after the calls sent before, as exit_actor(); ray.kill ends it at once). The worker runs them (worker.py).
READY = "__ray_ready__"
TERMINATE = "__ray_terminate__"


def _ready_stub(self):
    """True, once the actor's constructor has run (Ray's __ray_ready__)."""


def _terminate_stub(self):
    """Ends the actor once the calls sent before this one have run (Ray's __ray_terminate__)."""


def _builtin(stub, name):
    return _MethodInfo(generator_plan(stub, {}, name), {}, ArgumentChecker(stub, name, skip_self=True))


def _method_table(cls):
    """{method name: _MethodInfo} for the public methods of `cls`."""
    table = {DAG_LOOP: _builtin(_dag_loop_stub, DAG_LOOP), READY: _builtin(_ready_stub, READY),
             TERMINATE: _builtin(_terminate_stub, TERMINATE)}
    if callable(getattr(cls, "__phalanx_checkpoint__", None)):
        table[SAVE_CHECKPOINT] = _MethodInfo(generator_plan(_save_checkpoint_stub, {}, SAVE_CHECKPOINT), {},
                                             ArgumentChecker(_save_checkpoint_stub, SAVE_CHECKPOINT, skip_self=True))
    for name, member in inspect.getmembers(cls, predicate=callable):
        if name.startswith("__") and name != "__call__":
            continue
        # (a staticmethod has no self; a classmethod comes bound already)
        plain = not isinstance(inspect.getattr_static(cls, name, None), (staticmethod, classmethod))
        full = f"{cls.__qualname__}.{name}"
        given = getattr(member, "__phalanx_method_options__", {})
        table[name] = _MethodInfo(generator_plan(member, given, full), given,
                                  ArgumentChecker(member, full, skip_self=plain),
                                  getattr(member, "__phalanx_retry__", None))
    return table


class ActorClass:
    """A class made remote. `.remote(*args)` starts an actor and returns its handle."""

    def __init__(self, cls, options):
        _check_actor_options(options, f"@phalanx.remote on class {cls.__qualname__}")
        self._cls = cls
        self._options = dict(_ACTOR_DEFAULTS, **options)
        self._resources_given = _asks_resources(options)
        _check_groups(cls, self._options["concurrency_groups"])
        self._name = f"{cls.__module__}.{cls.__qualname__}"
        self._pickled = None
        self._function_id = None
        self._methods = _method_table(cls)
        self._is_async = None  # (found at the first .remote())
        self._init_checker = ArgumentChecker(cls.__init__, f"{cls.__qualname__}.__init__", skip_self=True) \
            if "__init__" in vars(cls) or any("__init__" in vars(b) for b in cls.__mro__[1:-1]) else None

    def __repr__(self):
        return f"ActorClass({self._cls.__name__})"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor class {self._name} cannot be instantiated directly; "
                        f"use {self._cls.__name__}.remote(...)")

    def bind(self, *args, **kwargs):
        """A node of a call graph that makes this actor when the graph runs (phalanx.dag.ClassNode)."""
        if self._init_checker is not None:
            self._init_checker.check(args, kwargs)
        from phalanx.dag.nodes import ClassNode
        return ClassNode(self, args, kwargs)

    def __getattr__(self, name):
        """The class's own attributes through its remote name, as Ray's ActorClass gives them: class
        attributes and static methods reached as `Cls.X` inside the actor's methods (whose globals hold
        the ActorClass)."""
        cls = self.__dict__.get("_cls")
        missing = AttributeError(f"actor class {self.__dict__.get('_name', '?')} has no attribute {name!r}")
        if cls is None or name.startswith("__"):
            raise missing
        for klass in cls.__mro__:
            if name in vars(klass):
                raw = vars(klass)[name]
                break
        else:
            raise missing
        # Never the very function or class object the class holds: cloudpickle would then find it
        # importable as `module.Cls.name` and pickle it (and the class with it) by reference, which a
        # worker cannot import. Methods are the actor's calls (handle.method.remote()), not forwarded.
        if isinstance(raw, staticmethod):
            fn = raw.__func__
            return functools.wraps(fn)(lambda *args, **kwargs: fn(*args, **kwargs))
        if isinstance(raw, classmethod):
            return getattr(cls, name)  # (a bound method: a new object each time)
        if inspect.isfunction(raw) or isinstance(raw, type):
            raise missing
        return getattr(cls, name)

    def options(self, **options):
        _check_actor_options(options, f"{self._name}.options()")
        clone = ActorClass.__new__(ActorClass)
        clone.__dict__.update(self.__dict__)
        clone._options = dict(self._options, **options)
        clone._given_options = dict(getattr(self, "_given_options", {}), **options)
        clone._resources_given = self._resources_given or _asks_resources(options)
        _check_groups(self._cls, clone._options["concurrency_groups"])
        return clone

    def _bundle_misfit(self, opts):
        """Ray's check of an actor for its placement group (util/placement_group.bundle_misfit): an actor that
        asks for no resources (memory aside) is created with 1 CPU in Ray, and must fit that too."""
        unit = unit_instance_misfit(opts)
        if unit:
            return unit
        strategy = scheduling_strategy_of(opts)
        if getattr(strategy, "placement_group", None) is None:
            return None
        resources = ray_resources(opts, opts["num_cpus"] if self._resources_given else None)
        placement = resources if self._resources_given else dict(resources, CPU=1)
        return bundle_misfit(strategy, resources, placement, self._cls.__qualname__)

    def _placement_cpus(self, opts):
        """Ray's actor that asks for no resources: placed where 1 CPU is free, holding none once there (in a
        placement group its bundle places it)."""
        if self._resources_given or getattr(scheduling_strategy_of(opts), "placement_group", None) is not None:
            return 0.0
        return 1.0

    def _register(self):
        if self._function_id is None:
            try:
                self._pickled = ser.dumps_function(self._cls)
            except Exception as e:
                raise SerializationError(f"actor class {self._name} cannot be pickled: "
                                         f"{type(e).__name__}: {e}") from e
            self._function_id = hashlib.blake2b(self._pickled, digest_size=16).digest()
        _core.register_function(self._function_id, self._name, self._pickled)

    def _runs_concurrently(self, opts):
        """Ray's out-of-order actors: an async or threaded one takes each call once its own arguments are
        ready; one that runs a call at a time keeps each caller's order."""
        if self._is_async is None:
            self._is_async = any(inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m)
                                 for _, m in inspect.getmembers(self._cls, predicate=inspect.isfunction))
        return self._is_async or (opts["max_concurrency"] or 1) > 1 or bool(opts["concurrency_groups"]) or \
            bool(opts.get("allow_out_of_order_execution"))

    def remote(self, *args, **kwargs):
        if self._init_checker is not None:
            self._init_checker.check(args, kwargs)
        api.ensure_initialized()
        self._register()
        opts = self._options
        name = opts["name"]
        full_name = ""
        if name is not None:
            full_name = _qualified(name, opts["namespace"])
            existing = _lookup(full_name)
            if existing is not None:
                if opts["get_if_exists"]:
                    return existing
                raise _name_taken(name, full_name)
        misfit = self._bundle_misfit(opts)
        if misfit:
            raise ValueError(misfit)
        lifetime = opts["lifetime"] or state.default_actor_lifetime  # (init(job_config=)'s default)
        encoded, contained, holders = encode_args(args, kwargs, self._name, api.inline_limit())
        if opts["checkpoint_interval_s"] is not None and not callable(getattr(self._cls, "__phalanx_checkpoint__", None)):
            raise ValueError(f"checkpoint_interval_s needs {self._cls.__qualname__}.__phalanx_checkpoint__ (and "
                             "__phalanx_restore__ to use what it returns after a restart)")
        if opts["max_concurrency"] or opts["concurrency_groups"] or opts["checkpoint_interval_s"] or name:
            encoded.append(_hidden_arg({"max_concurrency": opts["max_concurrency"],
                                        "groups": opts["concurrency_groups"],
                                        "checkpoint_interval_s": opts["checkpoint_interval_s"],
                                        "name": name}))  # (get_runtime_context().get_actor_name())
        refs = _core.submit_task(self._function_id, self._name, encoded, 1, float(opts["num_cpus"]), 0,
                                 contained, kind=_KIND_CREATION,
                                 max_restarts=opts["max_restarts"], max_task_retries=opts["max_task_retries"],
                                 actor_name=full_name, detached=lifetime == "detached",
                                 resources=resource_map(opts), calls_unordered=self._runs_concurrently(opts),
                                 runtime_env=runtime_env.resolve(opts.get("runtime_env")),
                                 placement_cpus=self._placement_cpus(opts), **_strategy_kw(opts))
        ready = refs[0]
        scoped = lifetime != "detached"  # it ends when all its handles are gone (named or not, as in Ray)
        handle = ActorHandle(ready.task_id(), self._function_id, self._name, self._methods,
                             ready if scoped else None, opts["max_pending_calls"], opts["max_task_retries"])
        if full_name:
            handle._full_name = full_name
            # Another process may also have found no such actor just now: the raylets give the name to the
            # creation that claimed it first (this lookup waits for ours to be settled), and the other one is
            # refused here, at once, as Ray refuses it.
            owner = _lookup(full_name)
            if owner is not None and owner._actor_id != handle._actor_id:
                if opts["get_if_exists"]:
                    return owner
                raise _name_taken(name, full_name)
        return handle


def _name_taken(name, full_name):
    namespace = full_name.rpartition("/")[0]
    from phalanx.exceptions import ActorAlreadyExistsError
    return ActorAlreadyExistsError(f"The name {name} (namespace={namespace}) is already taken. Please use a different "
                                   f"name or get the existing actor using ray.get_actor('{name}', "
                                   f"namespace='{namespace}')")


class ActorHandle:
    """A handle to a live actor. `handle.method.remote(*args)` calls a method;
    handles can be passed to tasks and other actors."""

    # What phalanx.cancel(handle) says (api.py).
    CANCEL_REFUSAL = ("cancel() takes the ObjectRef of a task or actor call, not an actor handle: "
                      "phalanx.kill(actor) stops an actor")

    _full_name = None  # "namespace/name" when this process made or looked up the actor by its name

    def __init__(self, actor_id, function_id, class_name, methods, ready_ref=None, max_pending_calls=-1,
                 max_task_retries=0):
        self._max_task_retries = max_task_retries  # the count for methods with retry_exceptions
        self._actor_id = actor_id
        self._function_id = function_id
        self._class_name = class_name
        self._methods = methods
        # The ready object of the actor's creation, carried by the creator's handle of an actor that ends
        # when its handles are gone (not detached) and by every copy of it: the raylets count the handles
        # by counting it (_private/actor_lifetime.py). None for detached actors and handles got by name.
        self._ready = ready_ref
        self._max_pending = max_pending_calls
        if ready_ref is not None:
            actor_lifetime.watch(self)

    def __getattr__(self, name):
        methods = self.__dict__.get("_methods")
        if methods is None or name not in methods:
            raise AttributeError(f"actor {self.__dict__.get('_class_name', '?')} has no method '{name}'")
        info = methods[name]
        return ActorMethod(self, name, info.plan, info.checker, retry=info.retry)

    def __repr__(self):
        return f"ActorHandle({self._class_name}, {self._actor_id.hex()})"

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._function_id, self._class_name, self._methods, self._ready,
                              self._max_pending, self._max_task_retries))

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)


class ActorMethod:
    def __init__(self, handle, name, plan, checker=None, group=None, call_name=None, retry=None):
        self._retry = retry  # (max_task_retries or None, retry_exceptions), or None
        self._handle = handle
        self._name = name
        self._plan = plan  # (generator mode, number of returns, backpressure)
        self._checker = checker
        self._group = group  # this call's concurrency group, overriding the method's
        self._call_name = call_name  # the call's task name (Ray's .options(name=)); default Class.method

    def options(self, num_returns=None, concurrency_group=None, _generator_backpressure_num_objects=None, name=None,
                retry_exceptions=None, max_task_retries=None):
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if num_returns is not None:
            check_num_returns(num_returns)
        if concurrency_group is not None and (not isinstance(concurrency_group, str) or not concurrency_group):
            raise ValueError(f"concurrency_group must be a group name, got {concurrency_group!r}")
        plan = self._plan
        if num_returns is not None or _generator_backpressure_num_objects is not None:
            info = self._handle._methods[self._name]
            given = dict(info.given)
            if info.plan[0] and "num_returns" not in given:  # a method that yields: it streams
                given["num_returns"] = ("streaming", "dynamic")[info.plan[0] - 1]
            if num_returns is not None:
                given["num_returns"] = num_returns
            if _generator_backpressure_num_objects is not None:
                given["_generator_backpressure_num_objects"] = _generator_backpressure_num_objects
            # (the class is not at hand: the worker says so if a method given a generator mode does not yield)
            plan = generator_plan(None, given, f"{self._handle._class_name}.{self._name}.options()")
        retry = self._retry
        if retry_exceptions is not None or max_task_retries is not None:
            base = retry or (None, False)
            retry = _retry_option(max_task_retries if max_task_retries is not None else base[0],
                                  retry_exceptions if retry_exceptions is not None else (base[1] or None))
        return ActorMethod(self._handle, self._name, plan, self._checker, concurrency_group or self._group,
                           name or self._call_name, retry)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor methods are called with .remote(): {self._name}.remote(...)")

    def bind(self, *args, **kwargs):
        """A node of a call graph calling this method (phalanx.dag)."""
        if self._checker is not None:
            self._checker.check(args, kwargs)
        from phalanx.dag.nodes import ClassMethodNode
        return ClassMethodNode(self, args, kwargs)

    def remote(self, *args, **kwargs):
        if self._checker is not None:
            self._checker.check(args, kwargs)
        if state.mode is None:  # (as Ray's: a handle's call starts no cluster; its actor is in the one it came from)
            raise PhalanxError(f"phalanx is not started: {self._handle._class_name}.{self._name}.remote() calls an "
                               f"actor of a cluster this process is not connected to (call phalanx.init() first; "
                               f"Ray's 'Ray has not been started yet')")
        h = self._handle
        full = self._call_name or f"{h._class_name}.{self._name}"
        if h._max_pending > 0 and _core.actor_calls_in_flight(h._actor_id, h._max_pending) >= h._max_pending:
            raise PendingCallsLimitExceededError(
                f"actor {h._class_name} ({h._actor_id.hex()[:12]}) has {h._max_pending} calls from this "
                f"process in flight already (max_pending_calls={h._max_pending}); wait for some first")
        encoded, contained, holders = encode_args(args, kwargs, full, api.inline_limit())
        if self._group is not None:
            encoded.append(_hidden_arg(self._group))
        if self._retry is not None and self._retry[1]:
            count = self._retry[0] if self._retry[0] is not None else h._max_task_retries
            if count != 0:
                encoded.append(retry_arg(1 << 30 if count == -1 else count, self._retry[1]))
        mode, n, backpressure = self._plan
        own = self._retry[0] if self._retry is not None and self._retry[0] is not None else -2  # (-2: the actor's)
        refs = _core.submit_task(h._function_id, full, encoded, n, 0.0, 0, contained, kind=_KIND_METHOD,
                                 actor_id=h._actor_id, method_name=self._name, generator=mode,
                                 backpressure=backpressure, call_max_task_retries=own)
        if mode:
            return generator.wrap(refs, mode, backpressure)
        if n == 1:
            return refs[0]
        return None if n == 0 else refs


_class_tables = {}  # function id -> method table (a class's is the same every time)


def _lookup(full_name, timeout=10.0):
    """The handle of the live actor registered as `full_name`, or None."""
    try:
        actor_id, function_id, class_name, _ = _core.get_actor(full_name, int(timeout * 1000))
    except NotFoundError:
        return None
    methods = _class_tables.get(function_id)
    if methods is None:
        _, pickled = _core.get_function(function_id, int(timeout * 1000))
        methods = _class_tables[function_id] = _method_table(cloudpickle.loads(pickled))
    handle = ActorHandle(actor_id, function_id, class_name, methods)
    handle._full_name = full_name
    return handle


def get_actor(name, namespace=None, timeout=10.0):
    """The handle of the live actor called `name` in `namespace` (default:
    this job's); NotFoundError (also a ValueError, as Ray's) if there is none."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"get_actor() takes an actor's name (a non-empty string), got {name!r}")
    api.ensure_initialized()
    full = _qualified(name, namespace)
    handle = _lookup(full, timeout)
    if handle is None:
        # (Ray's words first: Ray programs and tests match "Failed to look up actor with name")
        raise NotFoundError(f"Failed to look up actor with name '{name}': no live actor named '{name}' in namespace "
                            f"'{full.rpartition('/')[0]}' (it was never made there, it died, or it lives in another "
                            "namespace: get_actor(name, namespace=...))")
    return handle


def kill(handle, no_restart=True):
    """Ends the actor's process now. Pending and later calls fail with
    ActorDiedError. With no_restart=False it is restarted if max_restarts allows."""
    if not isinstance(handle, ActorHandle):
        raise InvalidArgumentError(f"kill() takes an actor handle, got {type(handle).__name__}")
    api.ensure_initialized()
    _core.kill_actor(handle._actor_id, no_restart, 10000)
    if no_restart and handle._full_name:
        # As Ray's kill returns once the GCS has the death: the name is free when this returns.
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                owner = _core.get_actor(handle._full_name, 2000)[0]
            except NotFoundError:
                break
            if owner != handle._actor_id:
                break
            time.sleep(0.005)


def exit_actor():
    """Ends the actor this runs in, for good (Ray's ray.actor.exit_actor): no restart, whatever
    max_restarts says; the call running it and the calls after it fail with ActorDiedError."""
    task = state.current_task.get()
    if task is None or task.kind == _core.TaskCall.TASK:  # (not an actor's constructor or method)
        raise TypeError("exit_actor() is called from inside an actor's method; this is not an actor")
    _core.kill_actor(task.actor_id, True, 10000)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the raylet ends this process now
        time.sleep(0.05)
    os._exit(1)


__all__ = ["ActorClass", "ActorHandle", "ActorDiedError", "method", "get_actor", "kill", "exit_actor"]


def checkpoint(actor, timeout=60.0):
    """Makes `actor` take a checkpoint now: it runs __phalanx_checkpoint__()
    (after the calls sent before this one) and the runtime keeps what it
    returns, for __phalanx_restore__ after a restart. Returns once it is kept.
    (docs/fault-tolerance.md)"""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"checkpoint() takes an actor handle, got {type(actor).__name__}")
    if SAVE_CHECKPOINT not in actor._methods:
        raise ValueError(f"actor {actor._class_name} has no __phalanx_checkpoint__ method")
    return api.get(getattr(actor, SAVE_CHECKPOINT).remote(), timeout=timeout)
