"""Exceptions phalanx raises. Each message says what happened and to what."""


class PhalanxError(Exception):
    """Base class of every phalanx error."""


class UnavailableError(PhalanxError, ConnectionError):
    """A part of the system (the raylet, redis-server, a node) is gone or unreachable."""


class GetTimeoutError(PhalanxError, TimeoutError):
    """`get` or `wait` ran past its timeout."""


class ObjectStoreFullError(PhalanxError, MemoryError):
    """The object store cannot make room for an object."""


class WorkerCrashedError(PhalanxError):
    """The worker process running a task died, and the task's retries ran out."""


class ObjectLostError(PhalanxError):
    """Every copy of an object is gone (or it was freed)."""


class ActorDiedError(PhalanxError):
    """The actor is dead: killed, its process died past max_restarts, its
    constructor raised, or the process that created it exited. The message
    names the actor and says why."""


class InfeasibleError(PhalanxError):
    """No node has the resources a task or actor asks for (it waited the
    infeasible timeout for one to join)."""


class NotFoundError(PhalanxError, LookupError):
    """What was asked for (a named actor, ...) does not exist."""


class CollectiveError(PhalanxError, ValueError):
    """A reduce could not complete: its inputs differ in dtype or shape, one is
    not a numeric numpy array, or too many of them failed. The message names
    the inputs (their position in the list given and their ObjectRef)."""


class SerializationError(PhalanxError, TypeError):
    """A value could not be pickled or unpickled."""


class TaskError(PhalanxError):
    """A remote task raised. `cause` is the original exception (when it could be
    pickled), `traceback_str` the remote traceback. The class of an instance
    also derives from the cause's class, so `except ValueError` still works."""

    def __init__(self, function_name, traceback_str, cause=None):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        super().__init__(function_name, traceback_str, cause)

    def __str__(self):
        return (f"task {self.function_name} raised an exception:\n"
                f"{self.traceback_str.rstrip()}")

    def __reduce__(self):
        return (_rebuild_task_error, (self.function_name, self.traceback_str, self.cause))

    @staticmethod
    def make(function_name, traceback_str, cause=None):
        """A TaskError whose class also derives from type(cause) when possible."""
        if cause is not None and not isinstance(cause, TaskError):
            cls = _dual_class(type(cause))
            if cls is not None:
                try:
                    err = cls.__new__(cls)
                    TaskError.__init__(err, function_name, traceback_str, cause)
                    return err
                except Exception:  # an exotic exception type; fall back
                    pass
        if isinstance(cause, TaskError):
            return cause
        return TaskError(function_name, traceback_str, cause)


_dual_cache = {}


def _dual_class(cause_cls):
    if cause_cls in _dual_cache:
        return _dual_cache[cause_cls]
    cls = None
    try:
        cls = type(f"TaskError({cause_cls.__name__})", (TaskError, cause_cls),
                   {"__module__": __name__, "__init__": TaskError.__init__,
                    "__str__": TaskError.__str__, "__reduce__": TaskError.__reduce__})
    except TypeError:  # incompatible layouts (e.g. some C exceptions)
        cls = None
    _dual_cache[cause_cls] = cls
    return cls


def _rebuild_task_error(function_name, traceback_str, cause):
    return TaskError.make(function_name, traceback_str, cause)


_CODE_TO_CLASS = {8: WorkerCrashedError, 9: ObjectLostError, 5: ObjectStoreFullError,
                  4: UnavailableError, 3: GetTimeoutError, 11: ActorDiedError, 2: NotFoundError,
                  12: InfeasibleError, 13: CollectiveError}


def error_for_code(code, message):
    """The exception for a phalanx status code (see core/status.h)."""
    return _CODE_TO_CLASS.get(code, PhalanxError)(message)
