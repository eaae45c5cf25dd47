"""The Python worker process: `python -m phalanx._private.worker`, started by
the raylet. It connects back over the raylet's Unix socket, then runs the
tasks the raylet pushes, one at a time, until the raylet goes away."""
import gc
import os
import sys
import time
import traceback

import cloudpickle

from phalanx import _core
from phalanx._private import serialization as ser
from phalanx._private import state
from phalanx.exceptions import SerializationError, TaskError, UnavailableError

_functions = {}
_actors = {}  # actor id -> instance (a worker hosts at most one)
_ORIGINAL_CUDA = os.environ.get("CUDA_VISIBLE_DEVICES")


def _set_gpus(gpu_ids):
    """CUDA_VISIBLE_DEVICES for the task about to run: exactly its GPUs."""
    state.gpu_ids = list(gpu_ids)
    if gpu_ids:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
    elif _ORIGINAL_CUDA is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = _ORIGINAL_CUDA


def _load_function(function_id):
    fn = _functions.get(function_id)
    if fn is None:
        name, pickled = _core.get_function(function_id, 60000)
        try:
            fn = cloudpickle.loads(pickled)
        except Exception as e:
            raise SerializationError(f"cannot load remote function {name} in the worker: "
                                     f"{type(e).__name__}: {e}") from e
        _functions[function_id] = fn
    return fn


def _return_values(result, num_returns, name):
    if num_returns == 1:
        return (result,)
    if num_returns == 0:
        return ()
    try:
        values = tuple(result)
    except TypeError:
        values = None
    if values is None or len(values) != num_returns:
        raise ValueError(f"{name} was declared with num_returns={num_returns} but returned "
                         f"{type(result).__name__} {'' if values is None else f'of length {len(values)}'}")
    return values


def _callable_for(kind, function_id, actor_id, method_name):
    if kind == 2:  # an actor method
        instance = _actors.get(actor_id)
        if instance is None:
            raise RuntimeError(f"this worker hosts no actor {actor_id.hex()[:12]}")
        return getattr(instance, method_name)
    return _load_function(function_id)  # a function, or the class for a creation


def run_task(task):
    task_id, function_id, name, args, num_returns, attempt, kind, actor_id, method_name, gpu_ids = task
    start = time.perf_counter()
    if gpu_ids or state.gpu_ids:
        _set_gpus(gpu_ids)
    error = ""
    pos = kw = value = None
    try:
        fn = _callable_for(kind, function_id, actor_id, method_name)
        pos, kw = [], {}
        for keyword, arg_kind, payload in args:
            value = ser.resolve(arg_kind, payload)
            if keyword:
                kw[keyword] = value
            else:
                pos.append(value)
        del args, task
        result = fn(*pos, **kw)
        del pos, kw
        if kind == 1:  # a creation: keep the instance, return None as the "ready" marker
            _actors[actor_id] = result
            result = None
        returns = []
        for i, value in enumerate(_return_values(result, num_returns, name), 1):
            oid = _core.object_id(task_id, i)
            try:
                meta, bufs, contained = ser.serialize(value)
            except Exception as e:
                raise SerializationError(f"return value {i} of {name} cannot be pickled: "
                                         f"{type(e).__name__}: {e}") from e
            returns.append((oid, _core.prepare_return(oid, ser.kind_of(value), meta, bufs, contained), contained))
    except BaseException as e:  # noqa: BLE001 - everything reaches the caller
        pos = kw = value = args = task = None  # noqa: F841 (the traceback keeps this frame)
        # An argument's task failed: pass its error on unchanged.
        err = e if isinstance(e, TaskError) else TaskError.make(name, traceback.format_exc(), e)
        error = f"{type(e).__name__}: {e}"
        meta, bufs, contained = ser.serialize_error(err)
        returns = []
        for i in range(1, num_returns + 1):
            oid = _core.object_id(task_id, i)
            returns.append((oid, _core.prepare_return(oid, ser.KIND_ERROR, meta, bufs, contained), contained))
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            _core.task_done(task_id, returns, time.perf_counter() - start, error, exiting=True)
            raise
    _core.task_done(task_id, returns, time.perf_counter() - start, error)
    return not error


def main():
    from phalanx._private.node import _die_with_parent
    _die_with_parent()  # a worker does not outlive its raylet, even mid-task
    if os.getppid() == 1:
        return  # the raylet died before we got here
    sock = os.environ["PHALANX_RAYLET_SOCKET"]
    token = os.environ["PHALANX_WORKER_TOKEN"]
    state.info = _core.connect(sock, True, token, 30000)
    state.mode = "worker"
    while True:
        try:
            task = _core.next_task(-1)
        except UnavailableError:
            break  # the raylet is gone or told us to go
        ok = run_task(task)
        # Its store arguments are unmapped and unpinned now, not at the next task.
        del task
        if not ok:
            gc.collect()  # a raised exception's traceback holds the frames that held them, in a cycle
    _core.disconnect()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    # Skip interpreter teardown: user modules may hang in their atexit hooks.
    os._exit(0)
