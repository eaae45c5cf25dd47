"""The batches of one submission to a Pool (apply_async, map_async, imap), filled in as they complete.

Each batch is an actor call's ref; its outcome is the list run_batch returned (values, or Failure for
the items that raised), or, when the call itself failed (the actor died, the cluster went), the call's
error once for each of the batch's items. Thread-safe: outcomes arrive on phalanx's ref-waiter thread
(ref.future() callbacks, nothing here polls); readers block on an Event or a Queue, each
wait with the caller's timeout."""
import queue
import threading
from multiprocessing import TimeoutError

from phalanx.util.multiprocessing._pool_actor import Failure


class BatchResults:
    """callback (all values, or the one value when single) or error_callback (the first exception to
    complete) is called once, through `runner`, after the last batch of a closed submission; then
    done() is true."""

    def __init__(self, runner, callback=None, error_callback=None, single=False):
        self._runner = runner
        self._callback = callback
        self._error_callback = error_callback
        self._single = single
        self._lock = threading.Lock()
        self._batches = []          # index -> list of outcomes, None until the batch completes
        self._sizes = []            # index -> number of items
        self._pending = 0
        self._closed = False        # no batch will be added
        self._first_failure = None  # in the order the batches completed
        self._finished = queue.Queue()  # batch indices, in the order they completed
        self._done = threading.Event()

    def add(self, ref, size):
        """Registers the batch that `ref` (a run_batch call) computes, of `size` items; its index."""
        with self._lock:
            if self._closed:
                raise RuntimeError("BatchResults.add after close()")
            index = len(self._batches)
            self._batches.append(None)
            self._sizes.append(size)
            self._pending += 1
        ref.future().add_done_callback(lambda fut: self._complete(index, fut))
        return index

    def close(self):
        """No batch will be added: completes the submission once the batches added so far complete."""
        with self._lock:
            self._closed = True
            last = self._pending == 0
        if last:
            self._finish()

    def _complete(self, index, fut):
        error = fut.exception()
        outcomes = fut.result() if error is None else [Failure(error)] * self._sizes[index]
        with self._lock:
            self._batches[index] = outcomes
            self._pending -= 1
            if self._first_failure is None:
                self._first_failure = next((o for o in outcomes if isinstance(o, Failure)), None)
            last = self._closed and self._pending == 0
        self._finished.put(index)
        if last:
            self._finish()

    def _finish(self):
        if self._first_failure is not None and self._error_callback is not None:
            self._runner.run(self._error_callback, self._first_failure.exception(), self._done.set)
        elif self._first_failure is None and self._callback is not None:
            values = self.outcomes()
            self._runner.run(self._callback, values[0] if self._single else values, self._done.set)
        else:
            self._done.set()

    def done(self):
        """Whether every batch completed (and the callback, if any, ran)."""
        return self._done.is_set()

    def wait(self, timeout=None):
        """Until done() or `timeout` seconds (None: no limit); whether done."""
        return self._done.wait(timeout)

    def failed(self):
        """Whether an item raised or a batch was lost. REQUIRES: done()."""
        return self._first_failure is not None

    def outcomes(self):
        """Every item's outcome, in submission order. REQUIRES: every batch added so far completed."""
        with self._lock:
            return [o for batch in self._batches for o in batch]

    def batch(self, index):
        """The outcomes of batch `index`. REQUIRES: it completed (next_completed returned it)."""
        with self._lock:
            return self._batches[index]

    def next_completed(self, timeout=None):
        """The index of the next batch to complete (each once, in the order they completed); raises
        multiprocessing.TimeoutError after `timeout` seconds (None: no limit)."""
        try:
            return self._finished.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no batch of the pool's completed within {timeout} s") from None
