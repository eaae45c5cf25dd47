"""ObjectRefs as futures: `ref.future()` (a concurrent.futures.Future) and
`await ref` in asyncio code (the driver's own, or an async actor's method).

One waiter thread per process watches every ref someone is waiting on: it
asks the core which are ready (a wait that returns within milliseconds, so
refs added meanwhile are picked up at once) and completes their futures
with the values or the errors, from its own thread; asyncio gets them
through the futures' thread-safe callbacks."""
import asyncio
import concurrent.futures
import threading

from phalanx import _core
from phalanx._private import serialization as ser
from phalanx._private import api

_SLICE_MS = 5  # longest a newly added ref waits for the waiter to look at it


class _Waiter:
    def __init__(self):
        self._lock = threading.Lock()
        self._pending = {}  # id -> (ref, [futures])
        self._wake = threading.Event()
        self._thread = None

    def future(self, ref):
        fut = concurrent.futures.Future()
        with self._lock:
            entry = self._pending.get(ref.binary())
            if entry is None:
                entry = self._pending[ref.binary()] = (ref, [])
            entry[1].append(fut)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="phalanx-ref-waiter", daemon=True)
                self._thread.start()
        self._wake.set()
        return fut

    def _run(self):
        while True:
            self._wake.clear()
            with self._lock:
                ids = list(self._pending)
            if not ids:
                self._wake.wait(1.0)
                continue
            try:
                ready = _core.wait(ids, 1, _SLICE_MS, True)
            except BaseException as e:  # noqa: BLE001 - the cluster is gone: every waiter hears why
                self._fail_all(e)
                continue
            if ready:
                self._complete(ready)

    def _complete(self, ready):
        try:
            values = _core.get(list(ready), 0)
        except BaseException as e:  # noqa: BLE001
            values = [None] * len(ready)
            error = e
        else:
            error = None
        for oid, value in zip(ready, values):
            with self._lock:
                entry = self._pending.pop(oid, None)
            if entry is None:
                continue
            futures = entry[1]
            try:
                if error is not None:
                    raise error
                kind, payload = value
                result = ser.resolve(kind, payload)
            except BaseException as e:  # noqa: BLE001 - the task's error goes to the awaiting code
                for f in futures:
                    if not f.cancelled():
                        f.set_exception(e)
                continue
            for f in futures:
                if not f.cancelled():
                    f.set_result(result)

    def _fail_all(self, e):
        with self._lock:
            entries = list(self._pending.values())
            self._pending.clear()
        for _, futures in entries:
            for f in futures:
                if not f.cancelled():
                    f.set_exception(e)


_waiter = _Waiter()


def ref_future(ref):
    """A concurrent.futures.Future that completes with the ref's value (or its error)."""
    api.ensure_initialized()
    return _waiter.future(ref)


def ref_await(ref):
    return asyncio.wrap_future(ref_future(ref)).__await__()


def install():
    _core.ObjectRef.future = ref_future
    _core.ObjectRef.__await__ = ref_await
    _core.ObjectRef.as_future = lambda ref: asyncio.wrap_future(ref_future(ref))
