"""What a worker hands in for a call: the stored form of an error (error_value), and the items of a
generator call as it yields them (_Stream: each stored and handed in at once, with backpressure; the
drivers of sync and async generators)."""
import asyncio
import inspect
import os
import sys
import traceback

from phalanx import _core
from phalanx._private import serialization as ser
from phalanx._private import state
from phalanx.exceptions import SerializationError, TaskCancelledError, TaskError
from phalanx.generator import DynamicObjectRefGenerator


class ArgumentFailed(Exception):
    """An argument of the call holds its task's error (`error`, a TaskError): the call does not run."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


def resolve_arg(kind, payload):
    """An argument's value (serialization.resolve); its task's error as ArgumentFailed."""
    try:
        return ser.resolve(kind, payload)
    except TaskError as e:
        raise ArgumentFailed(e) from None


def error_value(name, e, final=False):
    """The stored form of an error, in Ray's words (its RayTaskError texts): a TaskError with the call's own
    traceback (remote_traceback); for one raised by a get in the call (another task's error), that error's
    text after the call's frames; for an argument that holds its task's error, 'At least one of the input
    arguments ...' and that error's text. A `final` error, or a cancellation, passes on unchanged; the class
    of the error is still the first cause's (`except ValueError` catches it, as in Ray)."""
    if final or isinstance(e, TaskCancelledError):
        err = e
    elif isinstance(e, ArgumentFailed):
        text = (f"{_header(name)}\n  At least one of the input arguments for this task could not be computed:\n"
                f"ray.exceptions.RayTaskError: {e.error}")
        err = TaskError.make(name, text, e.error.cause)
    elif isinstance(e, TaskError):
        text = remote_traceback(traceback.format_exc(), name)
        text = text.replace(f"\n{TaskError.__module__}.RayTaskError", "\nray.exceptions.RayTaskError")
        err = TaskError.make(name, text, e.cause)
    else:
        err = TaskError.make(name, remote_traceback(traceback.format_exc(), name), e)
    return ser.serialize_error(err)


def worker_state_actor(actor_id):
    """The actor instance this worker hosts under `actor_id` (worker.py's table), or None."""
    worker = sys.modules.get("phalanx._private.worker")
    return getattr(worker, "_actors", {}).get(actor_id)


def _node_ip():
    return os.environ.get("PHALANX_NODE_IP") or "127.0.0.1"


def _is_internal(line):
    return line.startswith("  File ") and any(p in line for p in _INTERNAL_FILES)


_INTERNAL_FILES = (f"{os.sep}phalanx{os.sep}_private{os.sep}", f"{os.sep}phalanx{os.sep}actor.py\"",
                   f"{os.sep}phalanx{os.sep}remote_function.py\"")


def task_title(kind, name):
    """Ray's name of a running task (its worker's process title, its traceback's header): `ray::f` for a task,
    `ray::A.__init__` for an actor's constructor (kind 1), `ray::A.m` for its calls (kind 2)."""
    if kind == 1:
        return f"ray::{name.rpartition('.')[2]}.__init__"
    if kind == 2:
        return "ray::" + ".".join(name.split(".")[-2:])
    return "ray::" + name.rpartition(".")[2]


def _header(name):
    """The first line of the running call's error text: `ray::f() (pid=..., ip=...)`, with the actor's id and
    repr for an actor's call."""
    task = state.current_task.get()
    kind = task.kind if task is not None else 0
    header = f"{task_title(kind, name)}() (pid={os.getpid()}, ip={_node_ip()}"
    if kind == 1:  # an actor's constructor (the actor is not there to show)
        header += f", repr={name.rpartition('.')[2]}"
    elif kind == 2:  # an actor's call
        instance = worker_state_actor(task.actor_id)
        try:
            shown = repr(instance)
        except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the task's error
            shown = f"<{type(instance).__name__} object>"
        header += f", actor_id={task.actor_id.hex()}, repr={shown}"
    return header + ")"


def remote_traceback(text, name):
    """A task's traceback as Ray's RayTaskError reads: `ray::f() (pid=..., ip=...)` (an actor's call:
    `ray::A.f() (pid=..., ip=..., actor_id=..., repr=<repr of the actor>)`) in place of `Traceback (most
    recent call last):`, and without phalanx's own frames (the worker's run_task and the like)."""
    header = _header(name)
    out = []
    skipping = False
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("Traceback "):
            out.append(header)
            skipping = False
        elif _is_internal(line):
            skipping = True  # (its code line and caret line follow)
        elif skipping and line.startswith("    "):
            continue
        else:
            skipping = False
            out.append(line)
    return "\n".join(out) + "\n"


def _max_items():
    """How many items one generator call may yield (Ray's max_num_generator_returns, 100 million; its
    RAY_max_num_generator_returns, or PHALANX_MAX_GENERATOR_RETURNS, in the node's environment sets it)."""
    for name in ("PHALANX_MAX_GENERATOR_RETURNS", "RAY_max_num_generator_returns"):
        if os.environ.get(name, "").strip().isdigit():
            return int(os.environ[name])
    return 100_000_000


_MAX_ITEMS = _max_items()


class _Stream:
    """The producer's side of one generator call: each value it yields is
    stored and handed in at once; with backpressure it waits for the caller
    to read before it runs ahead by more. Made before the call runs, so that
    however the call ends its stream ends too."""

    def __init__(self, task_id, name, mode, backpressure):
        self.task_id = task_id
        self.name = name
        self.mode = mode
        self.backpressure = backpressure
        self.count = 0
        self.consumed = 0
        self.ended = False

    def _hand_in(self, kind, meta, bufs, contained, oid=None):
        oid = oid or self._next_id()
        _core.stream_item(self.task_id, (oid, _core.prepare_return(oid, kind, meta, bufs, contained, True),
                                         contained))
        self.count += 1

    def _next_id(self):
        return _core.stream_item_id(self.task_id, self.count)

    def put(self, value):
        """Hands in the next item; True when the producer must wait (wait_credit) before the next."""
        if self.count >= _MAX_ITEMS:
            raise RuntimeError(f"{self.name} yielded more than {_MAX_ITEMS} items, the most a generator call may "
                               f"return (max_num_generator_returns: RAY_max_num_generator_returns sets it)")
        oid = self._next_id()
        try:
            meta, bufs, contained = ser.serialize(value, oid)
        except Exception as e:
            raise SerializationError(f"item {self.count} of {self.name} cannot be pickled: "
                                     f"{type(e).__name__}: {e}") from e
        self._hand_in(ser.kind_of(value), meta, bufs, contained, oid)
        return 0 < self.backpressure <= self.count - self.consumed

    def failed(self, e):
        """The producer raised: (the return's value, error text). Streaming:
        the error is the caller's next item (as in Ray); dynamic: the return is the error."""
        if self.mode == 2:
            raise e
        self._hand_in(ser.KIND_ERROR, *error_value(self.name, e))
        return self.result(), f"{type(e).__name__}: {e}"

    def wait_credit(self):
        """Waits until the caller has read enough; False when it let go."""
        need = self.count - self.backpressure + 1
        while self.consumed < need:
            consumed, dropped = _core.stream_credit(self.task_id, need, 1000)
            if dropped:
                return False
            self.consumed = max(self.consumed, consumed)
        return True

    def end(self):
        """Says the stream is over, once, however it ended (the caller's raylet
        then knows how many items to wait for, whichever way they come)."""
        if not self.ended:
            self.ended = True
            _core.stream_item(self.task_id, None, True, self.count)

    def result(self):
        """The value of the call's return."""
        if self.mode == 1:
            return self.count
        return DynamicObjectRefGenerator(_core.ObjectRef(_core.stream_item_id(self.task_id, k))
                                         for k in range(self.count))

    def returns(self, result):
        """The call's one return. A dynamic one's value holds the items' refs
        and travels inline (its items are held for the caller only until it
        is recorded: a copy left in this node's store would not hold them there)."""
        oid = _core.object_id(self.task_id, 1)
        meta, bufs, contained = ser.serialize(result)
        if self.mode == 2:
            return [(oid, _core.pack(ser.kind_of(result), meta, bufs), contained)]
        return [(oid, _core.prepare_return(oid, ser.kind_of(result), meta, bufs, contained), contained)]


def _not_a_generator(name, result):
    return TypeError(f"{name} was called as a generator (num_returns='streaming' or 'dynamic') but returned "
                     f"{type(result).__name__}, not a generator: give it a yield, or call it with a number of "
                     f"returns")


def _run_generator(stream, gen):
    """Runs a generator call to its end: (value of its return, error text)."""
    if not inspect.isgenerator(gen):
        if inspect.isasyncgen(gen):
            return asyncio.run(_run_async_generator(stream, gen))
        raise _not_a_generator(stream.name, gen)
    try:
        for value in gen:
            if stream.put(value) and not stream.wait_credit():
                gen.close()  # the caller let go: GeneratorExit at its yield
                break
    except Exception as e:  # noqa: BLE001 - it reaches the caller
        return stream.failed(e)
    finally:
        stream.end()
    return stream.result(), ""


async def _run_async_generator(stream, agen):
    loop = asyncio.get_running_loop()
    try:
        async for value in agen:
            # (credit is waited for off the loop: the actor's other calls go on meanwhile)
            if stream.put(value) and not await loop.run_in_executor(None, stream.wait_credit):
                await agen.aclose()
                break
    except Exception as e:  # noqa: BLE001 - it reaches the caller
        return stream.failed(e)
    finally:
        stream.end()
    return stream.result(), ""
