"""Generators: tasks and actor methods that yield.

    @phalanx.remote
    def produce(n):
        for i in range(n):
            yield i                      # each value is an object of its own

    gen = produce.remote(5)              # an ObjectRefGenerator, at once
    for ref in gen:                      # each ref as soon as its value is made
        print(phalanx.get(ref))

A function or method with `yield` is called with num_returns="streaming"
unless it says otherwise (as in Ray). The caller reads the refs in order as
the producer makes them (`for`, `next`, or `async for` / `await gen.__anext__()`
in asyncio code). With `_generator_backpressure_num_objects=N` the producer
pauses while N items are unread. If the producer raises, or its process
dies, the next ref holds the error (`get` raises it) and the iteration stops
after it. Dropping the generator frees the items not read yet and stops the
producer at its next item.

num_returns="dynamic" runs the generator to its end and returns one ref,
whose value is a DynamicObjectRefGenerator of the items' refs."""
import asyncio
import inspect
import time

from phalanx import _core
from phalanx._private import serialization as ser
from phalanx._private import stuck as _stuck
from phalanx.exceptions import GetTimeoutError

STREAMING = "streaming"
DYNAMIC = "dynamic"
_MODES = {STREAMING: 1, DYNAMIC: 2}
# How long one wait for items may take before the caller looks at interrupts again.
_SLICE_MS = 1000


def is_generator_function(fn):
    return inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)


def check_generator_options(fn, num_returns, backpressure, where):
    """A generator mode needs a generator function, and backpressure a streaming one."""
    if num_returns in _MODES and fn is not None and not is_generator_function(fn) and not isinstance(fn, type):
        raise TypeError(f"{where}: num_returns={num_returns!r} needs a generator function (one that yields), "
                        f"and {getattr(fn, '__qualname__', fn)} is not one")
    if backpressure is not None:
        if isinstance(backpressure, bool) or not isinstance(backpressure, int) or (backpressure < 1 and
                                                                                   backpressure != -1):
            raise ValueError(f"_generator_backpressure_num_objects must be an int >= 1 (or -1: none), "
                             f"got {backpressure!r}")
        if backpressure > 0 and num_returns != STREAMING:
            raise ValueError(f"{where}: _generator_backpressure_num_objects applies to num_returns='streaming' "
                             f"only, not {num_returns!r}")


def mode_code(num_returns):
    """(generator mode for the TaskSpec, the number of returns it has)."""
    code = _MODES.get(num_returns) if isinstance(num_returns, str) else None
    return (code, 1) if code else (0, num_returns)


class ObjectRefGenerator:
    """The refs a streaming generator call yields, in order, as they are made."""

    def __init__(self, ref, ack_each=False):
        self._ref = ref              # the task's return: how the stream ended
        self._task_id = ref.task_id()
        self._next = 0               # refs handed out
        self._available = 0          # items known to be made
        self._ended = False          # all of them are here (the caller's raylet says so)
        self._done = False
        self._dropped = False
        self._ack_each = ack_each    # the producer waits on our reads (backpressure)

    def __iter__(self):
        return self

    def __next__(self):
        return self._next_sync(None)

    def _next_sync(self, timeout_s):
        """The next ref; StopIteration at the end; GetTimeoutError after timeout_s."""
        if self._done:
            raise StopIteration
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        stuck_ms = _stuck.threshold_ms()
        report_at = start + stuck_ms / 1000 if stuck_ms > 0 else None
        if self._ack_each and self._next > 0:
            self._available, self._ended = _core.stream_next(self._task_id, self._next, 0)
        while self._next >= self._available:
            if self._ended:
                return self._finish()
            if report_at is not None and time.monotonic() >= report_at:
                report_at = None
                _stuck.log.warning("a generator's next() has waited %.0f s for its item %d (still waiting): %s. %s",
                                   stuck_ms / 1000, self._next, _stuck.describe_waiting(self._ref), _stuck.HINT)
            slice_ms = _SLICE_MS
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GetTimeoutError(f"no item of the generator came within {timeout_s} s")
                slice_ms = min(slice_ms, max(1, int(left * 1000)))
            self._available, self._ended = _core.stream_next(self._task_id, self._next, slice_ms)
        k = self._next
        self._next += 1
        return _core.ObjectRef(_core.stream_item_id(self._task_id, k))

    def _finish(self):
        """Every item is read (the caller's raylet waits for all the producer
        made, whichever way they come): the return says how it ended."""
        self._done = True
        try:
            (kind, payload), = _core.get([self._ref.binary()], -1)
            ser.resolve(kind, payload)  # (raises the task's error)
        except Exception:  # noqa: BLE001 - the task failed or its process died: the error is the next item
            return self._ref
        self._drop()
        raise StopIteration

    def __aiter__(self):
        return self

    async def __anext__(self):
        ref = await asyncio.get_running_loop().run_in_executor(None, self._next_or_none)
        if ref is None:
            raise StopAsyncIteration
        return ref

    def _next_or_none(self):
        try:
            return self._next_sync(None)
        except StopIteration:  # (cannot cross a future)
            return None

    def _ready_now(self, wait_ms=0):
        """Whether next() would return at once (wait() with generators)."""
        if self._done or self._next < self._available or self._ended:
            return True
        self._available, self._ended = _core.stream_next(self._task_id, self._next, wait_ms)
        return self._next < self._available or self._ended

    def next_ready(self):
        """Ray's: whether next() returns at once, with an item or with the generator's error (True), or would
        wait or raise StopIteration (False)."""
        if self._done:
            return False
        if self._ready_now() and self._next < self._available:
            return True
        if not self._ended:
            return False
        try:  # every item is read: next() gives the error the generator ended with, if any
            (kind, payload), = _core.get([self._ref.binary()], 0)
            if kind not in (0, 1, 2):  # (its end is not here yet)
                return False
            ser.resolve(kind, payload)
        except Exception:  # noqa: BLE001 - the task failed or its process died
            return True
        return False

    def completed(self):
        """The ref that is ready once the generator has finished (its value:
        how many items it made; it raises the generator's error)."""
        return self._ref

    def is_finished(self):
        return self._done

    def _drop(self):
        if not self._dropped and _core is not None and _core.is_connected():
            self._dropped = True
            _core.stream_drop(self._task_id)

    def __del__(self):
        try:
            self._drop()
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass

    def __reduce__(self):
        raise TypeError("an ObjectRefGenerator cannot be passed to another task or actor: iterate it here "
                        "and pass the refs it yields")

    def __repr__(self):
        return f"ObjectRefGenerator({self._task_id.hex()}, read {self._next})"


class DynamicObjectRefGenerator:
    """The value of a num_returns="dynamic" call: the refs of what it yielded."""

    def __init__(self, refs):
        self._refs = list(refs)

    def __iter__(self):
        return iter(self._refs)

    def __len__(self):
        return len(self._refs)

    def __getitem__(self, i):
        return self._refs[i]

    def __repr__(self):
        return f"DynamicObjectRefGenerator({len(self._refs)} refs)"


def wrap(refs, mode, backpressure):
    """What .remote() returns for a generator call."""
    return ObjectRefGenerator(refs[0], ack_each=backpressure > 0) if mode == 1 else refs[0]
