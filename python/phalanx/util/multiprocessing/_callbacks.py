"""Where a Pool's callbacks run: one thread of the pool's own, as multiprocessing's result handler.

A callback may block (it may even use the pool), so it never runs on phalanx's ref-waiter thread, which
completes every future of the process. Thread-safe; the thread starts on the first job and ends after it
has been idle for IDLE_S (a later job starts it again)."""
import logging
import queue
import threading

logger = logging.getLogger(__name__)

IDLE_S = 5.0


class CallbackRunner:
    def __init__(self):
        self._jobs = queue.Queue()
        self._lock = threading.Lock()
        self._thread = None

    def run(self, fn, arg, then):
        """Calls fn(arg), then then(), on the runner's thread. An exception fn raises is logged (the
        result it belongs to still completes); `then` must not raise."""
        with self._lock:
            self._jobs.put((fn, arg, then))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="phalanx-pool-callbacks", daemon=True)
                self._thread.start()

    def _loop(self):
        while True:
            try:
                fn, arg, then = self._jobs.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._thread = None
                        return
                continue
            try:
                fn(arg)
            except Exception:  # noqa: BLE001 - a user's callback: say so, keep serving the others
                logger.exception("a Pool callback (%s) raised; its result is complete anyway",
                                 getattr(fn, "__qualname__", fn))
            finally:
                then()
