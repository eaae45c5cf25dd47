"""Ray's `ray.cloudpickle`: the cloudpickle package phalanx pickles with (Ray vendors a copy of the same
package; the names are cloudpickle's: dumps, loads, dump, load, CloudPickler, register_pickle_by_value...),
and the two helpers of Ray's copy, `dumps_debug` and `dump_debug`: a failure names the object and, with
RAY_PICKLE_VERBOSE_DEBUG (or PHALANX_PICKLE_VERBOSE_DEBUG) set, first prints what
`phalanx.util.inspect_serializability` finds in it."""
import os
from pickle import PicklingError

from cloudpickle import (CloudPickler, Pickler, __version__, dump, dumps, load, loads,  # noqa: F401
                         register_pickle_by_value, unregister_pickle_by_value)

__all__ = ["Pickler", "CloudPickler", "dumps", "loads", "dump", "load", "register_pickle_by_value",
           "unregister_pickle_by_value", "dumps_debug", "dump_debug"]


def _verbose():
    return bool(os.environ.get("RAY_PICKLE_VERBOSE_DEBUG") or os.environ.get("PHALANX_PICKLE_VERBOSE_DEBUG"))


def _debug(method, fn, obj, *args, **kwargs):
    try:
        return fn(obj, *args, **kwargs)
    except (TypeError, PicklingError) as exc:
        if _verbose():
            from phalanx.util.check_serialize import inspect_serializability
            inspect_serializability(obj)
            raise
        raise type(exc)(f"{method}({obj}) failed.\nTo check which non-serializable variables are captured in "
                        "scope, re-run the script with 'RAY_PICKLE_VERBOSE_DEBUG=1'.") from exc


def dumps_debug(obj, *args, **kwargs):
    """cloudpickle.dumps, its failure naming the object (and inspected, in verbose debug mode)."""
    return _debug("ray.cloudpickle.dumps", dumps, obj, *args, **kwargs)


def dump_debug(obj, *args, **kwargs):
    """cloudpickle.dump, its failure naming the object (and inspected, in verbose debug mode)."""
    return _debug("ray.cloudpickle.dump", dump, obj, *args, **kwargs)
