"""Exceptions phalanx raises. Each message says what happened and to what.

Ray's names resolve too (`RayTaskError`, `RayActorError`, ...: see the end
of this module), so `except ray.exceptions.RayTaskError` works unchanged
after `import phalanx as ray`; they are the same classes, not copies."""


class PhalanxError(Exception):
    """Base class of every phalanx error."""


class UnavailableError(PhalanxError, ConnectionError):
    """A part of the system (the raylet, redis-server, a node) is gone or unreachable."""


class GetTimeoutError(PhalanxError, TimeoutError):
    """`get` or `wait` ran past its timeout."""


class OutOfMemoryError(PhalanxError, MemoryError):
    """Memory ran out: the object store (ObjectStoreFullError) or the node."""


class ObjectStoreFullError(OutOfMemoryError):
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


class NotFoundError(PhalanxError, LookupError, ValueError):
    """What was asked for (a named actor, ...) does not exist. Also a
    ValueError, which is what Ray raises for a missing named actor."""


class InvalidArgumentError(PhalanxError, TypeError, ValueError):
    """An argument of the wrong kind (`kill` of something that is not an
    actor handle, ...): both a TypeError and the ValueError Ray raises."""


class TaskCancelledError(PhalanxError):
    """The task was cancelled (`phalanx.cancel`) before it finished."""


class PendingCallsLimitExceededError(PhalanxError):
    """An actor handle has `max_pending_calls` calls in flight already."""


class OufOfBandObjectRefSerializationException(PhalanxError):
    """Ray's (its spelling): an ObjectRef pickled outside a value phalanx stores, with
    RAY_allow_out_of_band_object_ref_serialization=0."""


class ActorAlreadyExistsError(PhalanxError, ValueError):
    """Ray's: an actor of that name exists already in the namespace (also a ValueError, as Ray's)."""


class CollectiveError(PhalanxError, ValueError):
    """A reduce could not complete: its inputs differ in dtype or shape, one is
    not a numeric numpy array, or too many of them failed. The message names
    the inputs (their position in the list given and their ObjectRef)."""


class RuntimeEnvSetupError(PhalanxError):
    """A task's or actor's runtime environment (runtime_env) could not be set up on its node: a
    package that cannot be fetched or unpacked (the message says which and why)."""


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
        if self.traceback_str.startswith("ray::"):  # Ray's text, made by the worker (worker_streams.remote_traceback)
            return self.traceback_str.rstrip()
        return (f"task {self.function_name} raised an exception:\n"
                f"{self.traceback_str.rstrip()}")

    def __reduce__(self):
        return (_rebuild_task_error, (self.function_name, self.traceback_str, self.cause))

    def __repr__(self):
        kind = type(self.cause).__name__ if self.cause is not None else ""
        return f"RayTaskError({kind})({self.cause!r})" if kind else f"RayTaskError({self.function_name!r})"

    def as_instanceof_cause(self):
        """Ray's: this error as an instance of both RayTaskError and the cause's class (phalanx's errors
        already are, where the cause's class allows it; else this one)."""
        if self.cause is None or isinstance(self, type(self.cause)):
            return self
        return TaskError.make(self.function_name, self.traceback_str, self.cause)

    @staticmethod
    def make(function_name, traceback_str, cause=None):
        """A TaskError whose class also derives from type(cause) when possible."""
        if cause is not None and not isinstance(cause, TaskError):
            cls = _dual_class(type(cause))
            if cls is not None:
                try:
                    # Not through __init__: it would reach the cause class's own, whose arguments
                    # are its own. The cause's attributes and args come along (e.field, e.args[0]).
                    err = cls.__new__(cls)
                    err.__dict__.update(getattr(cause, "__dict__", {}))
                    err.function_name, err.traceback_str, err.cause = function_name, traceback_str, cause
                    err.args = cause.args
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
    if not issubclass(cause_cls, Exception):  # SystemExit, KeyboardInterrupt, GeneratorExit: raising one of
        _dual_cache[cause_cls] = None         # those in the caller would end or interrupt it instead
        return None
    try:
        cls = type(f"RayTaskError({cause_cls.__name__})", (TaskError, cause_cls),
                   {"__module__": __name__, "__init__": TaskError.__init__,
                    "__str__": TaskError.__str__, "__reduce__": TaskError.__reduce__,
                    "__repr__": TaskError.__repr__})
    except TypeError:  # incompatible layouts (e.g. some C exceptions)
        cls = None
    _dual_cache[cause_cls] = cls
    return cls


def _rebuild_task_error(function_name, traceback_str, cause):
    return TaskError.make(function_name, traceback_str, cause)


class RayChannelTimeoutError(CollectiveError, GetTimeoutError):
    """A compiled graph's channel read or write ran past its timeout (also a GetTimeoutError and a
    TimeoutError)."""


class RayCgraphCapacityExceeded(CollectiveError):
    """A compiled graph holds more results than it may (Ray's name; phalanx waits for the oldest instead,
    within _submit_timeout, and raises RayChannelTimeoutError)."""


class TaskUnschedulableError(PhalanxError):
    """A task cannot be scheduled (its placement group or node is gone, for good)."""


class ActorUnschedulableError(PhalanxError):
    """An actor cannot be scheduled (its placement group or node is gone, for good)."""


class TaskPlacementGroupRemoved(PhalanxError):
    """The placement group a task was to run in was removed."""


class ActorPlacementGroupRemoved(PhalanxError):
    """The placement group an actor was to run in was removed."""


class AsyncioActorExit(PhalanxError):
    """Raised in an async actor's method to end the actor (exit_actor() inside one)."""


class LocalRayletDiedError(PhalanxError):
    """The raylet of this process's node died."""


class OutOfDiskError(PhalanxError):
    """The disk the object store spills to is full."""


class PlasmaObjectNotAvailable(PhalanxError):
    """An object is not in the store (yet)."""


class ObjectReconstructionFailedMaxAttemptsExceededError(ObjectLostError):
    """An object was lost and rebuilding it from its task failed too often."""


class ObjectReconstructionFailedLineageEvictedError(ObjectLostError):
    """An object was lost and the record of how to rebuild it was let go."""


class CrossLanguageError(PhalanxError):
    """A call across languages failed (phalanx refuses Java and C++ calls from Python: docs/ray_compat.md)."""


class AuthenticationError(PhalanxError):
    """A peer did not prove it holds the cluster's token."""


class UnserializableException(PhalanxError):
    """A task raised an exception that cannot be pickled: this stands for it, with its text and traceback."""

    def __init__(self, original_stack_trace):
        super().__init__(original_stack_trace)
        self.original_stack_trace = original_stack_trace

    def __str__(self):
        return ("Failed to deserialize exception. Refer to the original stack trace below:\n"
                f"{self.original_stack_trace}")


class ActorUnavailableError(ActorDiedError):
    """Ray's: the actor is restarting (or its process just died and it will restart), so a call it could not take
    fails (max_task_retries spent: with the default 0, a call made while it restarts fails at once, as Ray's
    at-most-once calls do). Calls made once it is back run. A RayActorError, as in Ray."""


_CODE_TO_CLASS = {8: WorkerCrashedError, 9: ObjectLostError, 5: ObjectStoreFullError,
                  4: UnavailableError, 3: GetTimeoutError, 11: ActorDiedError, 2: NotFoundError,
                  12: InfeasibleError, 13: CollectiveError, 14: TaskCancelledError, 15: ActorUnavailableError}


def error_for_code(code, message):
    """The exception for a phalanx status code (see core/status.h)."""
    return _CODE_TO_CLASS.get(code, PhalanxError)(message)


# Ray's names for the same errors (ray.exceptions.*).
RayError = PhalanxError
RayTaskError = TaskError
RayActorError = ActorDiedError
RaySystemError = PhalanxError
ObjectFetchTimedOutError = GetTimeoutError
ObjectReconstructionFailedError = ObjectLostError


class OwnerDiedError(ObjectLostError):
    """Ray's: the process that owned the object died. phalanx objects have no owner process (an object
    lives while any process holds it), so phalanx does not raise it; defined for `except` clauses."""


class ReferenceCountingAssertionError(ObjectLostError):
    """Ray's: an object was freed while a borrower still used it. phalanx's counting keeps it for every
    holder, so phalanx does not raise it; defined for `except` clauses."""


NodeDiedError = UnavailableError
PendingCallsLimitExceeded = PendingCallsLimitExceededError
RayChannelError = CollectiveError
