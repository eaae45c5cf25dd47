"""The iterators Pool.imap and imap_unordered return: the input is cut into chunks lazily, one chunk in
flight per actor; each completed chunk lets the next one go. An item that raised comes out as its
exception (returned, not raised, as Ray's). Not thread-safe: one consumer."""
import collections
import collections.abc
import itertools
import time
import warnings

from phalanx.util.multiprocessing._batches import BatchResults
from phalanx.util.multiprocessing._pool_actor import Failure

NON_ITERABLE_WARNING = ("Passing a non-iterable argument to the Pool imap and imap_unordered methods is deprecated "
                        "(as in Ray since 2.3; see https://github.com/ray-project/ray/issues/24237): it is taken "
                        "as a list of one item; pass [value] instead")


class IMapIterator:
    """Base of OrderedIMapIterator and UnorderedIMapIterator: submission and shutdown; next() is theirs."""

    def __init__(self, pool, func, iterable, chunksize):
        if chunksize is not None and (not isinstance(chunksize, int) or chunksize < 1):
            raise ValueError(f"chunksize must be a positive int, got {chunksize!r}")
        try:
            self._input = iter(iterable)
        except TypeError:
            warnings.warn(NON_ITERABLE_WARNING, DeprecationWarning, stacklevel=4)  # (the caller of Pool.imap)
            iterable = [iterable]
            self._input = iter(iterable)
        if chunksize is None:
            chunksize = pool._default_chunksize(len(iterable)) if isinstance(iterable, collections.abc.Sized) else 1
        self._pool = pool
        self._func = func
        self._chunksize = chunksize
        self._batches = BatchResults(runner=None)
        self._submitted = 0
        self._input_done = False
        self._ready = collections.deque()  # outcomes taken from completed chunks, not yet returned
        for _ in range(pool._actor_count()):
            self._submit_next()

    def _submit_next(self):
        if self._input_done:
            return
        chunk = list(itertools.islice(self._input, self._chunksize))
        if chunk:
            ref = self._pool._submit_batch(self._submitted, self._func, [((item,), None) for item in chunk])
            self._batches.add(ref, len(chunk))
            self._submitted += 1
        if len(chunk) < self._chunksize:
            self.stop_submitting()

    def submit_rest(self):
        """Submits every chunk left (Pool.close: the work given before close() is done)."""
        while not self._input_done:
            self._submit_next()

    def stop_submitting(self):
        """No chunk is submitted any more (the input is done, or the pool was terminated)."""
        if not self._input_done:
            self._input_done = True
            self._batches.close()

    def _exhausted(self):
        return not self._ready and self._input_done and self._taken == self._submitted

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()

    def _pop(self):
        outcome = self._ready.popleft()
        return outcome.exception() if isinstance(outcome, Failure) else outcome


class OrderedIMapIterator(IMapIterator):
    """imap's iterator: the results in the order of the input."""

    def __init__(self, pool, func, iterable, chunksize):
        self._taken = 0        # chunks whose outcomes went to _ready, in order
        self._completed = set()  # chunk indices completed and not yet taken
        super().__init__(pool, func, iterable, chunksize)

    def next(self, timeout=None):
        """The next result; StopIteration at the end; multiprocessing.TimeoutError if it is not there
        within `timeout` seconds (None: no limit)."""
        if not self._ready:
            if self._exhausted():
                raise StopIteration
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._taken not in self._completed:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._completed.add(self._batches.next_completed(left))
                self._submit_next()
            while self._taken in self._completed:
                self._completed.discard(self._taken)
                self._ready.extend(self._batches.batch(self._taken))
                self._taken += 1
        return self._pop()


class UnorderedIMapIterator(IMapIterator):
    """imap_unordered's iterator: the results of each chunk as soon as it completes."""

    def __init__(self, pool, func, iterable, chunksize):
        self._taken = 0  # chunks whose outcomes went to _ready
        super().__init__(pool, func, iterable, chunksize)

    def next(self, timeout=None):
        """As OrderedIMapIterator.next, in the order the chunks complete."""
        if not self._ready:
            if self._exhausted():
                raise StopIteration
            index = self._batches.next_completed(timeout)
            self._submit_next()
            self._ready.extend(self._batches.batch(index))
            self._taken += 1
        return self._pop()
