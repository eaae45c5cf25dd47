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
calls. Calls from one caller run in the order they were made."""
import hashlib
import inspect

import cloudpickle

from phalanx import _core
from phalanx.exceptions import ActorDiedError, SerializationError
from phalanx.remote_function import check_num_returns, check_resource_options, encode_args, resource_map

_ACTOR_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "max_restarts", "max_task_retries", "name",
                  "lifetime"}
_ACTOR_DEFAULTS = {"num_cpus": 0, "num_gpus": 0, "memory": 0, "resources": None, "max_restarts": 0,
                   "max_task_retries": 0, "name": None, "lifetime": None}
_KIND_CREATION = 1
_KIND_METHOD = 2


def method(num_returns=1):
    """Declares how many values an actor method returns: `@phalanx.method(num_returns=2)`."""
    check_num_returns(num_returns)

    def mark(fn):
        fn.__phalanx_num_returns__ = num_returns
        return fn
    return mark


def _check_actor_options(opts, where):
    unknown = set(opts) - _ACTOR_OPTIONS
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for {where}; valid ones are {sorted(_ACTOR_OPTIONS)}")
    for key in ("max_restarts", "max_task_retries"):
        if key in opts and (not isinstance(opts[key], int) or opts[key] < -1):
            raise ValueError(f"{key} must be an int >= -1 (-1: no limit), got {opts[key]!r}")
    check_resource_options(opts)
    if opts.get("lifetime") not in (None, "detached"):
        raise ValueError(f"lifetime must be None or 'detached', got {opts['lifetime']!r}")
    if opts.get("name") is not None and (not isinstance(opts["name"], str) or not opts["name"]):
        raise ValueError(f"name must be a non-empty string, got {opts['name']!r}")


def _method_table(cls):
    """{method name: num_returns} for the public methods of `cls`."""
    table = {}
    for name, member in inspect.getmembers(cls, predicate=callable):
        if name.startswith("__") and name != "__call__":
            continue
        table[name] = getattr(member, "__phalanx_num_returns__", 1)
    return table


class ActorClass:
    """A class made remote. `.remote(*args)` starts an actor and returns its handle."""

    def __init__(self, cls, options):
        _check_actor_options(options, f"@phalanx.remote on class {cls.__qualname__}")
        self._cls = cls
        self._options = dict(_ACTOR_DEFAULTS, **options)
        self._name = f"{cls.__module__}.{cls.__qualname__}"
        self._pickled = None
        self._function_id = None
        self._methods = _method_table(cls)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor class {self._name} cannot be instantiated directly; "
                        f"use {self._cls.__name__}.remote(...)")

    def options(self, **options):
        _check_actor_options(options, f"{self._name}.options()")
        clone = ActorClass.__new__(ActorClass)
        clone.__dict__.update(self.__dict__)
        clone._options = dict(self._options, **options)
        return clone

    def _register(self):
        if self._function_id is None:
            try:
                self._pickled = cloudpickle.dumps(self._cls)
            except Exception as e:
                raise SerializationError(f"actor class {self._name} cannot be pickled: "
                                         f"{type(e).__name__}: {e}") from e
            self._function_id = hashlib.blake2b(self._pickled, digest_size=16).digest()
        _core.register_function(self._function_id, self._name, self._pickled)

    def remote(self, *args, **kwargs):
        from phalanx._private.api import ensure_initialized, inline_limit
        ensure_initialized()
        self._register()
        opts = self._options
        name = opts["name"]
        if name is not None:
            try:
                _core.get_actor(name, 10000)
            except Exception:
                pass
            else:
                raise ValueError(f"an actor named '{name}' already exists; "
                                 f"use phalanx.get_actor('{name}') to reach it")
        encoded, contained, holders = encode_args(args, kwargs, self._name, inline_limit())
        refs = _core.submit_task(self._function_id, self._name, encoded, 1, float(opts["num_cpus"]), 0,
                                 contained, kind=_KIND_CREATION,
                                 max_restarts=opts["max_restarts"], max_task_retries=opts["max_task_retries"],
                                 actor_name=name or "", detached=opts["lifetime"] == "detached",
                                 resources=resource_map(opts))
        ready = refs[0]
        return ActorHandle(ready.task_id(), self._function_id, self._name, self._methods, ready)


class ActorHandle:
    """A handle to a live actor. `handle.method.remote(*args)` calls a method;
    handles can be passed to tasks and other actors."""

    def __init__(self, actor_id, function_id, class_name, methods, ready_ref=None):
        self._actor_id = actor_id
        self._function_id = function_id
        self._class_name = class_name
        self._methods = methods
        self._ready = ready_ref  # resolves when the constructor has run (creator's handle only)

    def __getattr__(self, name):
        methods = self.__dict__.get("_methods")
        if methods is None or name not in methods:
            raise AttributeError(f"actor {self.__dict__.get('_class_name', '?')} has no method '{name}'")
        return ActorMethod(self, name, methods[name])

    def __repr__(self):
        return f"ActorHandle({self._class_name}, {self._actor_id.hex()[:12]})"

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._function_id, self._class_name, self._methods))

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)


class ActorMethod:
    def __init__(self, handle, name, num_returns):
        self._handle = handle
        self._name = name
        self._num_returns = num_returns

    def options(self, num_returns=None):
        return ActorMethod(self._handle, self._name, self._num_returns if num_returns is None else num_returns)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor methods are called with .remote(): {self._name}.remote(...)")

    def remote(self, *args, **kwargs):
        from phalanx._private.api import ensure_initialized, inline_limit
        ensure_initialized()
        h = self._handle
        full = f"{h._class_name}.{self._name}"
        encoded, contained, holders = encode_args(args, kwargs, full, inline_limit())
        n = self._num_returns
        refs = _core.submit_task(h._function_id, full, encoded, n, 0.0, 0, contained, kind=_KIND_METHOD,
                                 actor_id=h._actor_id, method_name=self._name)
        if n == 1:
            return refs[0]
        return None if n == 0 else refs


def get_actor(name, timeout=10.0):
    """The handle of the live actor called `name`; NotFoundError if there is none."""
    from phalanx._private.api import ensure_initialized
    ensure_initialized()
    actor_id, function_id, class_name, state = _core.get_actor(name, int(timeout * 1000))
    _, pickled = _core.get_function(function_id, int(timeout * 1000))
    cls = cloudpickle.loads(pickled)
    return ActorHandle(actor_id, function_id, class_name, _method_table(cls))


def kill(handle, no_restart=True):
    """Ends the actor's process now. Pending and later calls fail with
    ActorDiedError. With no_restart=False it is restarted if max_restarts allows."""
    from phalanx._private.api import ensure_initialized
    ensure_initialized()
    if not isinstance(handle, ActorHandle):
        raise TypeError(f"kill() takes an actor handle, got {type(handle).__name__}")
    _core.kill_actor(handle._actor_id, no_restart, 10000)


__all__ = ["ActorClass", "ActorHandle", "ActorDiedError", "method", "get_actor", "kill"]
