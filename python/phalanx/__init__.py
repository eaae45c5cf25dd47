"""phalanx: remote functions and objects over a cluster of raylets.

    import phalanx
    phalanx.init()                       # an embedded local cluster

    @phalanx.remote
    def square(x):
        return x * x

    phalanx.get([square.remote(i) for i in range(10)])
"""
from phalanx._core import ObjectRef
from phalanx._private.api import cluster_stats, get, init, is_initialized, put, shutdown, wait
from phalanx.exceptions import (GetTimeoutError, ObjectLostError, ObjectStoreFullError, PhalanxError,
                                SerializationError, TaskError, UnavailableError, WorkerCrashedError)
from phalanx.remote_function import RemoteFunction

__version__ = "0.1.0"


def remote(*args, **options):
    """Makes a function remote: `@phalanx.remote` or `@phalanx.remote(num_cpus=1,
    num_returns=2, max_retries=3)`."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("use @phalanx.remote or @phalanx.remote(option=value, ...)")
    return lambda fn: _make_remote(fn, options)


def _make_remote(obj, options):
    if isinstance(obj, type):
        raise TypeError(f"remote classes (actors) are not supported yet: {obj.__name__}")
    return RemoteFunction(obj, options)


__all__ = ["init", "shutdown", "is_initialized", "remote", "get", "put", "wait", "cluster_stats",
           "ObjectRef", "RemoteFunction", "PhalanxError", "TaskError", "GetTimeoutError",
           "WorkerCrashedError", "ObjectStoreFullError", "ObjectLostError", "UnavailableError",
           "SerializationError"]
