"""The Python worker process: `python -m phalanx._private.worker`, started by
the raylet. It connects back over the raylet's Unix socket, then runs the
tasks the raylet pushes (and the calls an actor's callers send it) until the
raylet goes away.

Tasks and plain actors run one call at a time on the main thread. An actor
made with max_concurrency > 1 or concurrency groups runs its calls on a
thread pool per group; an actor with any `async def` method runs them all
on one asyncio event loop (a thread of its own), at most max_concurrency
(default 1000) of a group at once. The main thread keeps reading calls and
hands them over in arrival order."""
import asyncio
import faulthandler
import gc
import inspect
import math
import os
import signal
import sys
import threading
import time
import traceback
import types
from concurrent.futures import ThreadPoolExecutor

import cloudpickle

from phalanx import _core
from phalanx._private import metrics_recorder
from phalanx._private import serialization as ser
from phalanx._private import state
from phalanx._private.node import _die_with_parent, read_session_tls, read_session_token
from phalanx.actor import CONCURRENCY_ARG  # (the constructor or method never sees it)
from phalanx._private.task_options import MAX_CALLS_ARG, RETRY_ARG  # (nor the function these)
from phalanx import logging_config
from phalanx._private import runtime_env, worker_output
from phalanx._private.worker_streams import (_run_async_generator, _run_generator, _Stream, error_value,
                                             remote_traceback, resolve_arg, task_title)
from phalanx.exceptions import (ActorDiedError, RuntimeEnvSetupError, SerializationError, TaskCancelledError,
                                TaskError, UnavailableError, WorkerCrashedError)

_functions = {}
_calls_left = {}  # function id -> runs left before this worker exits (max_calls)
_exit_after_task = False
_env_error = None  # why this worker's runtime environment could not be set up: its tasks fail with it
_actors = {}  # actor id -> instance (a worker hosts at most one)
_actor_creations = {}  # actor id -> its creation task's tuple less the arguments (its resources, name)
_actor_class_names = {}  # actor id -> the class name its calls' handles show
_actor_names = {}  # actor id -> the name it was made with ("" if none)
_actor_reprs = {}  # actor id -> its repr() after its constructor, where its class defines __repr__
_ORIGINAL_CUDA = os.environ.get("CUDA_VISIBLE_DEVICES")
DEFAULT_ASYNC_CONCURRENCY = 1000
_MAX_CREATION_ERROR = 32 << 10  # characters of a constructor's traceback the actor's death cause keeps (its end)


def _set_gpus(gpu_ids):
    """CUDA_VISIBLE_DEVICES for the task about to run: exactly its GPUs. The node's GPUs are numbered from 0
    by the raylet; where the node was started with CUDA_VISIBLE_DEVICES set, GPU k is the k-th it lists, and
    get_gpu_ids() gives those names (strings), as Ray's does."""
    if _ORIGINAL_CUDA is not None and gpu_ids:
        visible = [v.strip() for v in _ORIGINAL_CUDA.split(",") if v.strip()]
        gpu_ids = [visible[g] if 0 <= g < len(visible) else str(g) for g in gpu_ids]
    state.gpu_ids = list(gpu_ids)
    if gpu_ids:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
    elif _ORIGINAL_CUDA is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = _ORIGINAL_CUDA


# Math libraries' threads (scheduler/worker_pool.cc): with PHALANX_THREADS=managed
# the raylet started this worker with one thread per library, and each task
# (and actor, from its creation on) gets as many as its CPUs. A limit the
# user set is left alone.
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS")
_threads_managed = os.environ.get("PHALANX_THREADS") == "managed"
_threads = 1


def _set_threads(n):
    """n threads for the math libraries loaded now and loaded later (torch's intra-op pool too)."""
    global _threads
    _threads = n
    for var in _THREAD_VARS:
        os.environ[var] = str(n)
    from threadpoolctl import threadpool_limits  # (imported once a task needs other than one thread)
    threadpool_limits(limits=n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)


def _load_function(function_id, kind=0):
    fn = _functions.get(function_id)
    if fn is None:
        name, pickled = _core.get_function(function_id, 60000)
        try:
            fn = cloudpickle.loads(pickled)
        except Exception as e:
            # Ray's words; printed too, so that the driver sees why (log_to_driver) even where it never gets the
            # error (an actor's constructor: its calls fail with ActorDiedError).
            what = f"The actor with name {name.rpartition('.')[2]}" if kind == 1 else "The remote function"
            why = (f"{what} failed to import on the worker. This may be because needed library dependencies are "
                   f"not installed in the worker environment or cannot be found from sys.path {sys.path}:\n\n"
                   f"{traceback.format_exc()}")
            print(f"RuntimeError: {why}", file=sys.stderr, flush=True)
            raise RuntimeError(why) from e
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


_UNSET = object()
_class_functions = {}  # (actor class, method name) -> the class's plain function, or None: look it up as Python does


def _ready():
    return True


def _callable_for(kind, function_id, actor_id, method_name):
    if _env_error is not None:
        raise _env_error
    if kind == 2:  # an actor method
        instance = _actors.get(actor_id)
        if instance is None:
            raise RuntimeError(f"this worker hosts no actor {actor_id.hex()[:12]}")
        if method_name == _SAVE_CHECKPOINT:
            return lambda: _save_checkpoint(actor_id, instance)
        if method_name == _DAG_LOOP:
            from phalanx.dag import loop
            return lambda *args: loop.start(instance, _is_async_class(type(instance)), *args)
        if method_name == "__ray_ready__" and not hasattr(type(instance), method_name):  # (actor.READY)
            return _ready
        if method_name == "__ray_terminate__" and not hasattr(type(instance), method_name):  # (actor.TERMINATE)
            from phalanx.actor import exit_actor
            return exit_actor
        # The class's method, as Ray calls it: an attribute of the instance of that name does not hide a
        # plain method (static and class methods, properties and the rest are looked up as Python does).
        cls = type(instance)
        key = (cls, method_name)
        fn = _class_functions.get(key, _UNSET)
        if fn is _UNSET:
            raw = next((vars(k)[method_name] for k in cls.__mro__ if method_name in vars(k)), None)
            fn = _class_functions[key] = raw if isinstance(raw, types.FunctionType) else None
        if fn is not None:
            return fn.__get__(instance, cls)
        return getattr(instance, method_name)
    return _load_function(function_id, kind)  # a function, or the class for a creation


def _retry_or_raise(e, attempt, retry, name):
    """After a run of a retry_exceptions call raised `e` (attempt runs retried so far): the next attempt's
    number, or `e` raised when Ray's option says not to retry it."""
    max_retries, exceptions = retry
    if attempt >= max_retries or (exceptions is not True and not isinstance(e, exceptions)):
        raise e
    attempt += 1
    print(f"phalanx: task {name} raised {type(e).__name__}: {e}; retrying it "
          f"({attempt} of {max_retries}, retry_exceptions)", file=sys.stderr, flush=True)
    return attempt


def _call_retrying(fn, pos, kw, retry, name):
    """fn(*pos, **kw), run again on an exception that retry_exceptions names (Ray's option), up to
    max_retries more times; the last exception reaches the caller."""
    attempt = 0
    while True:
        try:
            return fn(*pos, **kw)
        except Exception as e:
            attempt = _retry_or_raise(e, attempt, retry, name)


async def _call_retrying_async(fn, pos, kw, retry, name):
    """As _call_retrying, for an async actor's call: awaits each run."""
    attempt = 0
    while True:
        try:
            result = fn(*pos, **kw)
            return (await result) if inspect.isawaitable(result) else result
        except Exception as e:
            attempt = _retry_or_raise(e, attempt, retry, name)


def _resolve_args(args):
    """(positional, keyword, concurrency option, retry option) of a call's arguments."""
    pos, kw, concurrency, retry = [], {}, None, None
    for keyword, arg_kind, payload in args:
        value = resolve_arg(arg_kind, payload)
        if keyword == CONCURRENCY_ARG:
            concurrency = value
        elif keyword == RETRY_ARG:
            retry = value
        elif keyword:
            kw[keyword] = value
        else:
            pos.append(value)
    return pos, kw, concurrency, retry


def _generator_returns(task_id, gen, num_returns, name):
    """The returns of a generator declared with num_returns=N (Ray's static generator): the items it
    yielded before it raised keep their values and the error goes into the rest; items past N are
    dropped, saying so in the worker's log."""
    values, error = [], None
    try:
        for v in gen:
            if len(values) == num_returns:
                print(f"phalanx: {name} yielded more than num_returns={num_returns} values; the rest are dropped",
                      file=sys.stderr, flush=True)
                gen.close()
                break
            values.append(v)
        if len(values) < num_returns:
            raise ValueError(f"{name} was declared with num_returns={num_returns} but yielded {len(values)} values")
    except Exception as e:
        error = error_value(name, e)
    returns = [_value_return(task_id, i, v, name) for i, v in enumerate(values, 1)]
    for i in range(len(values) + 1, num_returns + 1):
        oid = _core.object_id(task_id, i)
        meta, bufs, contained = error
        returns.append((oid, _core.prepare_return(oid, ser.KIND_ERROR, meta, bufs, contained), contained))
    return returns


def _value_return(task_id, i, value, name):
    """Return `i` of the task, holding `value`: (object id, prepared return, ids it contains)."""
    oid = _core.object_id(task_id, i)
    try:
        meta, bufs, contained = ser.serialize(value, oid)
    except Exception as e:
        raise SerializationError(f"return value {i} of {name} cannot be pickled: "
                                 f"{type(e).__name__}: {e}") from e
    return oid, _core.prepare_return(oid, ser.kind_of(value), meta, bufs, contained), contained


def _returns_of(task_id, result, num_returns, name):
    if num_returns > 1 and inspect.isgenerator(result):
        return _generator_returns(task_id, result, num_returns, name)
    return [_value_return(task_id, i, v, name) for i, v in enumerate(_return_values(result, num_returns, name), 1)]


def _exit_error(e, kind, name, actor_id):
    """What the caller of a call that raised SystemExit (sys.exit) gets: never a SystemExit, which would end
    the caller's own process, and with status 0 when its code is lost. An actor's method or constructor
    with code 0 or None ends the actor for good, as Ray's do (ActorDiedError, Ray's RayActorError; a failing
    code is a crash: _crash_exit); a task ends its worker
    (WorkerCrashedError). The message names the call and the exit code."""
    how = f"sys.exit({e.code!r})" if e.code is not None else "sys.exit()"
    if kind == _core.TaskCall.TASK:
        return WorkerCrashedError(f"task {name} ended its worker process (pid {os.getpid()}) with {how}")
    actor = _actor_class_names.get(actor_id, name.rpartition(".")[0] or name)
    return ActorDiedError(f"The actor {actor} ({actor_id.hex()}) exited: {name} called {how} "
                          f"(an intended exit, as exit_actor(): the actor is not restarted)")


def _crash_exit(e, name):
    """sys.exit with a failing code in an actor's method: the process ends as a crash does (Ray's SYSTEM_ERROR
    exit), so the actor is restarted and the call retried where max_restarts and max_task_retries allow. (An
    exit with code 0 or None is an intended one, as exit_actor(): ActorDiedError, no restart.)"""
    code = e.code if isinstance(e.code, int) else 1
    if not isinstance(e.code, int) and e.code is not None:
        print(e.code, file=sys.stderr)  # (as Python prints sys.exit("why"))
    print(f"phalanx: actor method {name} called sys.exit({e.code!r}): the actor's process (pid {os.getpid()}) "
          f"ends with exit code {code}, as a crash (restarted if max_restarts allows)", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _error_returns(task_id, num_returns, name, e, final=False):
    meta, bufs, contained = error_value(name, e, final)
    returns = []
    for i in range(1, num_returns + 1):
        oid = _core.object_id(task_id, i)
        returns.append((oid, _core.prepare_return(oid, ser.KIND_ERROR, meta, bufs, contained), contained))
    return returns


def _count_call(function_id, max_calls):
    global _exit_after_task
    left = _calls_left.get(function_id, max_calls) - 1
    _calls_left[function_id] = left
    if left <= 0:
        _exit_after_task = True


# The process title (`ps`, /proc/PID/cmdline) of a worker is Ray's: `ray::f` for a task, `ray::A.__init__` for an
# actor's constructor, `ray::A.m` for its calls (or the name given in .options(name=)), set when a task of another
# name starts (the title stays between tasks). setproctitle (the package Ray uses) writes it; SPT_NOENV keeps it
# inside the original command line's bytes, so /proc/PID/environ stays readable (phalanx stack, the tests).
try:
    os.environ.setdefault("SPT_NOENV", "1")
    from setproctitle import setproctitle as _setproctitle
except ImportError:  # (a build without it: the title stays the command line)
    _setproctitle = None
_title_of = (None, None)  # (kind, name) of the task the title names


def _set_title(kind, name):
    global _title_of
    _title_of = (kind, name)
    if _setproctitle is None:
        return
    try:
        _setproctitle(task_title(kind, name))
    except Exception:  # noqa: BLE001 - a title is not worth a task
        pass


def run_task(task):
    """Runs one task on this thread; True when it did not raise. (The hot
    path of every task: keep it free of needless calls.)"""
    (task_id, function_id, name, args, num_returns, attempt, kind, actor_id, method_name, gpu_ids, _, _, num_cpus, _,
     generator, backpressure) = task
    start = time.perf_counter()
    if _title_of[1] != name or _title_of[0] != kind:
        _set_title(kind, name)
    if kind != 2 and (gpu_ids or state.gpu_ids):  # (an actor's methods keep its GPUs: a direct call names none)
        _set_gpus(gpu_ids)
    if _threads_managed and kind != 2:  # a task or an actor's creation (its methods keep the actor's)
        n = max(1, math.ceil(num_cpus))
        if n != _threads:
            _set_threads(n)
    context = state.current_task.set(task)
    creation = _core.TaskCall(task[:3] + (None,) + task[4:]) if kind == 1 else None
    stream = _Stream(task_id, name, generator, backpressure) if generator else None
    error = ""
    pos = kw = value = None
    try:
        if _cancel_between_tasks:
            _cancelled_before_start(task_id, kind, name)
        fn = _callable_for(kind, function_id, actor_id, method_name)
        concurrency = retry = None
        pos, kw = [], {}
        for keyword, arg_kind, payload in args:
            value = resolve_arg(arg_kind, payload)
            if not keyword:
                pos.append(value)
            elif keyword == CONCURRENCY_ARG:
                concurrency = value
            elif keyword == RETRY_ARG:
                retry = value
            elif keyword == MAX_CALLS_ARG:
                _count_call(function_id, value)
            else:
                kw[keyword] = value
        del args, task
        if kind == 1:
            _prepare_actor_executor(fn, concurrency)
        result = fn(*pos, **kw) if retry is None else _call_retrying(fn, pos, kw, retry, name)
        del pos, kw
        if _cancels_seen and task_id in _cancels_seen:  # it caught the KeyboardInterrupt, or saw is_canceled()
            _cancels_seen.discard(task_id)
            raise TaskCancelledError(f"task {name} was cancelled while it ran")
        if kind == 1:  # a creation: keep the instance, return None as the "ready" marker
            _actors[actor_id] = result
            _actor_creations[actor_id] = creation
            _actor_class_names[actor_id] = name
            _actor_names[actor_id] = (concurrency or {}).get("name") or ""
            if type(result).__repr__ is not object.__repr__:  # (Ray's: its lines are tagged with its repr now)
                try:
                    _actor_reprs[actor_id] = repr(result)[:200]
                except Exception:  # noqa: BLE001 - a broken __repr__ leaves the class name
                    pass
            _restore_checkpoint(actor_id, result, concurrency)  # (after a restart: before any call runs)
            _start_actor_executor(result, concurrency)
            result = None
        if stream:
            result, error = _run_generator(stream, result)
            returns = stream.returns(result)
        elif num_returns == 1:  # (the common case, without _returns_of's call)
            oid = _core.object_id(task_id, 1)
            try:
                meta, bufs, contained = ser.serialize(result, oid)
            except Exception as e:
                raise SerializationError(f"return value 1 of {name} cannot be pickled: "
                                         f"{type(e).__name__}: {e}") from e
            returns = [(oid, _core.prepare_return(oid, ser.kind_of(result), meta, bufs, contained), contained)]
        else:
            returns = _returns_of(task_id, result, num_returns, name)
    except BaseException as e:  # noqa: BLE001 - everything reaches the caller
        pos = kw = value = args = task = None  # noqa: F841 (the traceback keeps this frame)
        if _cancels_seen:
            _cancels_seen.discard(task_id)
        if isinstance(e, KeyboardInterrupt) and _core.cancel_requested(task_id, False):  # phalanx.cancel
            e = TaskCancelledError(f"task {name} was cancelled while it ran (KeyboardInterrupt in it)")
        if isinstance(e, SystemExit) and kind == 2 and e.code not in (None, 0):
            _crash_exit(e, name)  # (never returns)
        exits = isinstance(e, SystemExit) and kind != _core.TaskCall.TASK  # an actor ends itself: for good
        reported = _exit_error(e, kind, name, actor_id) if isinstance(e, SystemExit) else e
        error = f"{type(reported).__name__}: {reported}"
        if kind == 1 and reported is e and not isinstance(e, TaskError):  # a constructor raised: Ray's text
            error = remote_traceback(traceback.format_exc(), name).rstrip("\n")[-_MAX_CREATION_ERROR:]
        returns = _error_returns(task_id, num_returns, name, reported, reported is not e)
        if stream:
            stream.end()
        if exits or (isinstance(e, (KeyboardInterrupt, SystemExit)) and
                     threading.current_thread() is threading.main_thread()):
            _core.task_done(task_id, returns, time.perf_counter() - start, error, True, name)
            if exits:
                _core.kill_actor(actor_id, True, 10000)  # (no restart, as exit_actor(); the raylet ends us)
            raise
    finally:
        worker_output.end_of_task()
        state.current_task.reset(context)
    _core.task_done(task_id, returns, time.perf_counter() - start, error, False, name)
    if _checkpoint_every and kind == 2 and time.monotonic() >= _checkpoint_due:
        _periodic_checkpoint(actor_id)
    return not error


# ---- actor checkpoints (docs/fault-tolerance.md) ----

_SAVE_CHECKPOINT = "__phalanx_save_checkpoint__"  # (actor.SAVE_CHECKPOINT)
_DAG_LOOP = "__phalanx_dag_loop__"  # a compiled graph's loop (dag/loop.py's LOOP_METHOD)
_checkpoint_every = 0.0  # seconds between the hosted actor's own checkpoints; 0: none
_checkpoint_due = 0.0    # time.monotonic() of the next one
_checkpoint_lock = threading.Lock()


def _restore_checkpoint(actor_id, instance, concurrency):
    """After the constructor: the state kept before a restart goes to
    __phalanx_restore__; periodic checkpoints start if asked for."""
    global _checkpoint_every, _checkpoint_due
    if not callable(getattr(instance, "__phalanx_checkpoint__", None)):
        return
    restore = getattr(instance, "__phalanx_restore__", None)
    if callable(restore):
        blob = _core.actor_checkpoint(actor_id, None, 60000)
        if blob is not None:
            restore(cloudpickle.loads(blob))
    _checkpoint_every = float((concurrency or {}).get("checkpoint_interval_s") or 0)
    _checkpoint_due = time.monotonic() + _checkpoint_every
    concurrent = _is_async_class(type(instance)) or ((concurrency or {}).get("max_concurrency") or 1) > 1 or \
        (concurrency or {}).get("groups")
    if _checkpoint_every and concurrent:
        # Calls run on other threads: a timer of its own takes them.
        def every():
            while True:
                time.sleep(max(0.01, _checkpoint_due - time.monotonic()))
                if time.monotonic() >= _checkpoint_due:
                    _periodic_checkpoint(actor_id)
        threading.Thread(target=every, name="phalanx-checkpoint", daemon=True).start()


def _save_checkpoint(actor_id, instance):
    """Runs __phalanx_checkpoint__ and keeps what it returns (in the GCS). True."""
    global _checkpoint_due
    with _checkpoint_lock:
        value = instance.__phalanx_checkpoint__()
        try:
            blob = cloudpickle.dumps(value, protocol=5)
        except Exception as e:
            raise SerializationError(f"the checkpoint of {type(instance).__qualname__} cannot be pickled: "
                                     f"{type(e).__name__}: {e}") from e
        _core.actor_checkpoint(actor_id, blob, 60000)
        _checkpoint_due = time.monotonic() + _checkpoint_every
    return True


def _periodic_checkpoint(actor_id):
    global _checkpoint_due
    try:
        _save_checkpoint(actor_id, _actors[actor_id])
    except Exception as e:  # (the actor goes on; its log says why this one was not kept)
        _checkpoint_due = time.monotonic() + _checkpoint_every
        print(f"phalanx: checkpoint of actor {actor_id.hex()[:12]} failed: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)


# ---- actors that run calls concurrently ----

_executor = None  # how the hosted actor runs its calls; None: one at a time on the main thread


def _group_of(instance, task):
    """The concurrency group a call runs in: the caller's
    .options(concurrency_group=...), else the method's own."""
    for keyword, kind, payload in task.args:
        if keyword == CONCURRENCY_ARG:
            return ser.resolve(kind, payload)
    fn = getattr(type(instance), task.method_name, None)
    return getattr(fn, "__phalanx_concurrency_group__", None)


def _is_async_class(cls):
    return any(inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m)
               for _, m in inspect.getmembers(cls, predicate=inspect.isfunction))


class _ThreadedExecutor:
    """A thread pool per concurrency group (the default group: max_concurrency threads)."""

    def __init__(self, instance, max_concurrency, groups):
        self._instance = instance
        self._pools = {None: ThreadPoolExecutor(max_concurrency, thread_name_prefix="phalanx-actor")}
        for g, n in groups.items():
            self._pools[g] = ThreadPoolExecutor(n, thread_name_prefix=f"phalanx-actor-{g}")

    def submit(self, task):
        pool = self._pools.get(_group_of(self._instance, task), self._pools[None])
        pool.submit(_run_on_thread, task)


def _run_on_thread(task):
    _core.set_job_context(task.job_id, task.namespace, True, task.task_id)  # (what it submits is its children)
    run_task(task)


class _GroupLoop:
    """One concurrency group of an async actor: an event loop on a thread of its own, and a semaphore of
    the group's size. A call that blocks its thread (time.sleep in an async def) holds up its own group
    only, as in Ray, where each group has its own event loop thread."""

    def __init__(self, name, limit):
        self.loop = asyncio.new_event_loop()
        self._limit = limit
        self._sem = None  # made on the loop's thread
        self._tasks = {}  # task id -> the asyncio task running (or about to run) the call
        ready = threading.Event()
        suffix = f"-{name}" if name is not None else ""
        self._thread = threading.Thread(target=self._run, args=(ready,), name=f"phalanx-actor-loop{suffix}",
                                        daemon=True)
        self._thread.start()
        ready.wait()

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        self._sem = asyncio.Semaphore(self._limit)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def submit(self, task):
        self.loop.call_soon_threadsafe(self._start, task)

    def cancel(self, task_id):
        self.loop.call_soon_threadsafe(self._cancel, task_id)

    def _cancel(self, task_id):
        t = self._tasks.get(task_id)
        if t is not None:
            _cancels_seen.add(task_id)
            t.cancel()

    def _start(self, task):
        self._tasks[task.task_id] = self.loop.create_task(self._run_call(task))

    async def _run_call(self, task):
        try:
            async with self._sem:
                await _run_task_async(task)
        except asyncio.CancelledError:  # cancelled while it waited for its turn
            _cancels_seen.discard(task.task_id)
            e = TaskCancelledError(f"task {task.name} was cancelled before it ran")
            _core.task_done(task.task_id, _error_returns(task.task_id, task.num_returns, task.name, e), 0.0,
                            f"TaskCancelledError: {e}")
        finally:
            self._tasks.pop(task.task_id, None)  # (not a done-callback: that costs a turn of the loop per call)


class _AsyncExecutor:
    """An async actor's calls: a _GroupLoop for the default group (max_concurrency) and one for each
    concurrency group. Made before the constructor runs, whose thread then has the default group's loop as
    its event loop (asyncio.get_event_loop() there is the loop the default group's calls run on)."""

    def __init__(self, max_concurrency, groups):
        self.instance = None  # set once the constructor returned
        self._loops = {None: _GroupLoop(None, max_concurrency)}
        for g, n in groups.items():
            self._loops[g] = _GroupLoop(g, n)
        self._only = self._loops[None] if len(self._loops) == 1 else None
        asyncio.set_event_loop(self._loops[None].loop)

    def submit(self, task):
        if self._only is not None:  # no groups: no need to ask which (the common case)
            return self._only.submit(task)
        self._loops.get(_group_of(self.instance, task), self._loops[None]).submit(task)

    def cancel(self, task_id):
        """phalanx.cancel of a call: its asyncio task is cancelled (waiting for its turn or running)."""
        for g in self._loops.values():
            g.cancel(task_id)


async def _run_task_async(task):
    task_id, function_id, name, args, num_returns, attempt, kind, actor_id, method_name, gpu_ids = task[:10]
    if _title_of[1] != name or _title_of[0] != kind:
        _set_title(kind, name)
    stream = _Stream(task_id, name, task.generator, task.backpressure) if task.generator else None
    start = time.perf_counter()
    # (the loop's calls interleave on one thread: no parent for the thread; what
    # they submit takes its parent from state.current_task, this asyncio task's own)
    _core.set_job_context(task.job_id, task.namespace, True, b"")
    state.current_task.set(task)  # (this asyncio task's own context)
    error = ""
    try:
        if _cancel_between_tasks:
            _cancelled_before_start(task_id, kind, name)
        fn = _callable_for(kind, function_id, actor_id, method_name)
        pos, kw, _, retry = _resolve_args(args)
        del args
        result = fn(*pos, **kw) if retry is None or stream else await _call_retrying_async(fn, pos, kw, retry, name)
        del pos, kw
        if stream and inspect.isasyncgen(result):
            result, error = await _run_async_generator(stream, result)
            returns = stream.returns(result)
        elif stream:
            result, error = _run_generator(stream, result)
            returns = stream.returns(result)
        else:
            if inspect.isawaitable(result):
                result = await result
            if _cancels_seen and task_id in _cancels_seen:  # it caught the CancelledError: cancelled all the same
                raise asyncio.CancelledError()
            returns = _returns_of(task_id, result, num_returns, name)
    except BaseException as e:  # noqa: BLE001 - everything reaches the caller
        if _cancels_seen:
            _cancels_seen.discard(task_id)
        if isinstance(e, asyncio.CancelledError):  # phalanx.cancel: Ray's RayTaskError(TaskCancelledError)
            cancelled = TaskCancelledError(f"task {name} was cancelled while it ran (asyncio cancellation)")
            e = TaskError.make(name, f"{type(cancelled).__name__}: {cancelled}\n", cancelled)
        error = f"{type(e).__name__}: {e}"
        returns = _error_returns(task_id, num_returns, name, e)
        if stream:
            stream.end()
    _core.task_done(task_id, returns, time.perf_counter() - start, error, False, name)


_cancel_between_tasks = False  # a cancel's signal came while no task ran
_cancels_seen = set()  # running tasks told of their cancel (KeyboardInterrupt, is_canceled()): cancelled however they end


def _on_cancel_signal(signum, frame):
    """The raylet's nudge after a CANCEL_TASK for a task pushed here: the
    notice is read now (a queued task is then skipped when its turn comes);
    a task (not an actor's call, as in Ray) that this thread runs and that
    was the one cancelled gets KeyboardInterrupt."""
    global _cancel_between_tasks
    task = state.current_task.get()
    if task is None:  # (the cancelled task may be the one about to start: run_task checks)
        _cancel_between_tasks = True
    if _core.cancel_signalled(task.task_id if task is not None else b"") and task is not None and task.kind == 0:
        _cancels_seen.add(task.task_id)
        raise KeyboardInterrupt(f"task {task.name} was cancelled (phalanx.cancel)")


def _cancelled_before_start(task_id, kind, name):
    """A cancel signalled after this task left the queue and before it ran: it does not run."""
    global _cancel_between_tasks
    _cancel_between_tasks = False
    if kind != 1 and _core.cancel_requested(task_id, False):
        raise TaskCancelledError(f"task {name} was cancelled before it ran")


def _report_cancelled(task):
    """A task cancelled before it started: its returns (and stream) say so; it does not run."""
    task_id, name, num_returns = task.task_id, task.name, task.num_returns
    e = TaskCancelledError(f"task {name} was cancelled before it ran")
    if task.generator:
        _Stream(task_id, name, task.generator, task.backpressure).end()
    _core.task_done(task_id, _error_returns(task_id, num_returns, name, e), 0.0, f"TaskCancelledError: {e}")


def _prepare_actor_executor(cls, concurrency):
    """Before an async actor's constructor runs: its loops (the constructor sees the default one)."""
    global _executor
    if _executor is None and isinstance(cls, type) and _is_async_class(cls):
        concurrency = concurrency or {}
        _executor = _AsyncExecutor(concurrency.get("max_concurrency") or DEFAULT_ASYNC_CONCURRENCY,
                                   dict(concurrency.get("groups") or {}))


def _start_actor_executor(instance, concurrency):
    global _executor
    _prepare_actor_executor(type(instance), concurrency)  # (made already, unless the class was wrapped)
    if isinstance(_executor, _AsyncExecutor):
        _executor.instance = instance
        return
    concurrency = concurrency or {}
    groups = dict(concurrency.get("groups") or {})
    max_concurrency = concurrency.get("max_concurrency")
    if (max_concurrency or 1) > 1 or groups:
        _executor = _ThreadedExecutor(instance, max_concurrency or 1, groups)


def _read_cluster_credentials(session_dir):
    """The cluster's token and TLS setting from the node's session folder (0600, this user's, as the token
    Ray's workers hold), so a task can read the GCS as a driver does: nodes(), cluster_resources(),
    the state API. The raylet does not put them in a worker's environment."""
    if session_dir and not os.environ.get("PHALANX_CLUSTER_TOKEN"):
        token = read_session_token(session_dir)
        if token:
            os.environ["PHALANX_CLUSTER_TOKEN"] = token
        if read_session_tls(session_dir):
            os.environ["PHALANX_TLS"] = "1"


def _printing_for():
    """(job id, name) of what this thread prints for (worker_output.py): a task's function, an actor's class
    (its creator's job, from any of its threads), or None between tasks."""
    task = state.current_task.get()
    if task is not None and task.kind == 0:
        return task.job_id, task.name.rpartition(".")[2]
    for actor_id, creation in _actor_creations.items():  # (a worker hosts at most one actor)
        shown = _actor_reprs.get(actor_id)
        return creation.job_id, shown or _actor_class_names.get(actor_id, creation.name).rpartition(".")[2]
    if task is not None:  # an actor's constructor
        return task.job_id, task.name.rpartition(".")[2]
    return None


def main():
    _die_with_parent()  # a worker does not outlive its raylet, even mid-task
    if os.getppid() == 1:
        return  # the raylet died before we got here
    sock = os.environ["PHALANX_RAYLET_SOCKET"]
    token = os.environ["PHALANX_WORKER_TOKEN"]
    state.info = _core.connect(sock, True, token, 30000)
    state.mode = "worker"
    _read_cluster_credentials(os.environ.get("PHALANX_SESSION_DIR", ""))
    global _env_error
    try:
        runtime_env.setup_worker()
    except Exception as e:  # every task this worker takes fails with it (a worker started again would fail alike)
        _env_error = RuntimeEnvSetupError(f"the runtime environment of this worker could not be set up: "
                                          f"{type(e).__name__}: {e}")
        print(_env_error, file=sys.stderr, flush=True)
    worker_output.install(_printing_for)  # (prints reach the driver: log_to_driver)
    if os.environ.get(logging_config.ENV):  # the job's init(logging_config=...)
        logging_config.apply_from_environment()
    if _env_error is None:
        try:
            runtime_env.run_setup_hook()  # (after the above: what it prints and logs reaches the driver)
        except RuntimeEnvSetupError as e:
            _env_error = e
            print(_env_error, file=sys.stderr, flush=True)
    signal.signal(signal.SIGUSR2, _on_cancel_signal)
    # `phalanx stack`: SIGUSR1 writes every thread's Python stack to this worker's log.
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    while True:
        try:
            task = _core.next_task(-1)
        except UnavailableError:
            break  # the raylet is gone or told us to go
        if type(task) is tuple:  # a notice: ("cancel", task id), or ("cancelled", TaskCall): one not to run
            notice, what = task
            if notice == "cancelled":
                _report_cancelled(what)
            elif hasattr(_executor, "cancel"):
                _executor.cancel(what)
            del task, what
            continue
        if _executor is not None and task.kind == 2:
            _executor.submit(task)
            del task
            continue
        ok = run_task(task)
        # Its store arguments are unmapped and unpinned now, not at the next task.
        del task
        if _exit_after_task:
            break  # max_calls reached: the raylet starts a fresh worker for the next one
        if not ok:
            gc.collect()  # a raised exception's traceback holds the frames that held them, in a cycle
    metrics_recorder.flush()  # (what the last tasks recorded: the raylet keeps counters of workers gone)
    _core.disconnect()


def _run_worker():
    try:
        main()
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    # Skip interpreter teardown: user modules may hang in their atexit hooks.
    os._exit(0)


if __name__ == "__main__":
    # Run the copy that `import phalanx._private.worker` finds (runtime_context
    # and others read its state), not this __main__ one.
    from phalanx._private import worker as _worker
    _worker._run_worker()
