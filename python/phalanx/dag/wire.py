"""What travels on a compiled graph's edges: a pickled value, an error
raised upstream (as a value: the executions after it go on), or STOP (the
graph's teardown, passed along every edge so each actor ends its loop after
the last execution)."""

import pickle

import cloudpickle

from phalanx.exceptions import SerializationError, TaskError


class _Stop:
    def __reduce__(self):
        return (_stop, ())


def _stop():
    return STOP


STOP = _Stop()


class Raised:
    """An exception a step raised (a TaskError naming the method), carried to
    the steps after it and raised by the driver's get()."""
    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error

    def __reduce__(self):
        return (Raised, (self.error,))


def dumps_or_raise(value, what):
    """`value` as bytes; SerializationError naming `what` if it cannot be pickled."""
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001 - lambdas, local classes: cloudpickle takes them
        try:
            return cloudpickle.dumps(value, protocol=5)
        except Exception as e:  # noqa: BLE001
            raise SerializationError(f"{what} cannot be pickled: {type(e).__name__}: {e}") from None


def dumps(value, what):
    """`value` as bytes; a Raised naming `what` if it cannot be pickled (it goes on as the value)."""
    try:
        return dumps_or_raise(value, f"the value of {what}")
    except SerializationError as error:
        return pickle.dumps(Raised(TaskError.make(what, f"{type(error).__name__}: {error}\n", error)), protocol=5)


loads = pickle.loads
