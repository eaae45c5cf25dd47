"""Pool: Ray's ray.util.multiprocessing.Pool (multiprocessing.Pool's API) on phalanx actors.

    pool = Pool(processes=4, initializer=setup, initargs=(path,), maxtasksperchild=None,
                ray_address=None, ray_remote_args={"num_cpus": 1})
    pool.apply(f, (1, 2), {"k": 3})                     # f(1, 2, k=3), on one of the actors
    pool.map(f, items, chunksize=None)                  # [f(x) for x in items]
    pool.starmap(f, [(1, 2), (3, 4)])                   # [f(1, 2), f(3, 4)]
    r = pool.map_async(f, items, callback=cb, error_callback=ecb); r.get(timeout=10)
    for y in pool.imap(f, items, chunksize=1): ...      # lazily, in order (imap_unordered: as they finish)
    pool.close(); pool.join()                           # or terminate(), or `with Pool() as pool:`

Each process is an actor (num_cpus=0 unless ray_remote_args says otherwise) that runs the pool's
batches one at a time: the items are cut into chunks (by default len(items) / (4 x processes), rounded
up), dealt out round-robin; apply_async's calls go round-robin too. An item that raises: its exception
from get() (the rest of the batch still runs; the pool stays usable); imap yields it as a value.
callback and error_callback run on a thread of the pool's own, once per submission: callback on the
value (apply_async) or the list of values, error_callback on the first exception to come back.

Semantics of Ray's implementation (python/ray/util/multiprocessing/pool.py), written anew; the
differences are listed in docs/ray_compat.md."""
import logging
import weakref

from phalanx.util.multiprocessing import _cluster
from phalanx.util.multiprocessing._actor_slots import ActorSlots
from phalanx.util.multiprocessing._async_result import AsyncResult
from phalanx.util.multiprocessing._batches import BatchResults
from phalanx.util.multiprocessing._callbacks import CallbackRunner
from phalanx.util.multiprocessing._imap import IMapIterator, OrderedIMapIterator, UnorderedIMapIterator
from phalanx.util.multiprocessing._pool_actor import PoolActor, pool_actor_class

logger = logging.getLogger(__name__)

_context_warned = False

__all__ = ["Pool", "AsyncResult", "IMapIterator", "OrderedIMapIterator", "UnorderedIMapIterator", "PoolActor"]


class Pool:
    """A pool of actor processes (module docstring). Submitting methods may be called from any thread."""

    def __init__(self, processes=None, initializer=None, initargs=None, maxtasksperchild=None, context=None,
                 ray_address=None, ray_remote_args=None):
        """processes: the number of actors (default: the cluster's CPUs); initializer(*initargs) runs once
        in each; maxtasksperchild: batches an actor runs before it is replaced by a new one; context:
        ignored (as Ray); ray_address: the cluster to join, or "local" (used only if phalanx is not
        initialized; RAY_ADDRESS by default); ray_remote_args: the actors' options (num_cpus, resources,
        ...). Raises ValueError if processes is not positive or exceeds the cluster's CPUs."""
        if initializer is not None and not callable(initializer):
            raise TypeError(f"initializer must be a callable, got {initializer!r}")
        if maxtasksperchild is not None and (not isinstance(maxtasksperchild, int) or maxtasksperchild < 1):
            raise ValueError(f"maxtasksperchild must be a positive int or None, got {maxtasksperchild!r}")
        if ray_remote_args is not None and not isinstance(ray_remote_args, dict):
            raise TypeError(f"ray_remote_args must be a dict of actor options, got {ray_remote_args!r}")
        _warn_context(context)
        self._closed = False
        self._callbacks = CallbackRunner()
        self._iterators = weakref.WeakSet()  # imap iterators that may still submit chunks
        self._next_apply = 0
        processes = _cluster.connect(processes, ray_address)
        self._slots = ActorSlots(pool_actor_class(ray_remote_args), processes, initializer, initargs,
                                 maxtasksperchild)

    # ------------------------------------------------------------------ apply
    def apply(self, func, args=None, kwargs=None):
        """func(*args, **kwargs) on one of the actors; its value (or its exception, raised)."""
        return self.apply_async(func, args, kwargs).get()

    def apply_async(self, func, args=None, kwargs=None, callback=None, error_callback=None):
        """As apply, without waiting: an AsyncResult. callback(value) or error_callback(exception) runs
        once it is done. Raises ValueError if the pool is closed."""
        self._check_running()
        index, self._next_apply = self._next_apply, self._next_apply + 1
        batches = BatchResults(self._callbacks, callback, error_callback, single=True)
        batches.add(self._submit_batch(index, func, [(tuple(args or ()), kwargs)]), 1)
        batches.close()
        return AsyncResult(batches, single=True)

    # ------------------------------------------------------------------ map
    def map(self, func, iterable, chunksize=None):
        """[func(x) for x in iterable], computed in chunks of `chunksize` items by the actors."""
        return self._map_async(func, iterable, chunksize, False, None, None).get()

    def map_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        """As map, without waiting: an AsyncResult. callback(list of values) runs once all succeeded;
        else error_callback(the first exception to come back)."""
        return self._map_async(func, iterable, chunksize, False, callback, error_callback)

    def starmap(self, func, iterable, chunksize=None):
        """[func(*args) for args in iterable]."""
        return self._map_async(func, iterable, chunksize, True, None, None).get()

    def starmap_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        """As starmap, without waiting: an AsyncResult (callbacks as map_async)."""
        return self._map_async(func, iterable, chunksize, True, callback, error_callback)

    def _map_async(self, func, iterable, chunksize, star, callback, error_callback):
        self._check_running()
        items = iterable if hasattr(iterable, "__len__") else list(iterable)
        if chunksize is None:
            chunksize = self._default_chunksize(len(items))
        elif not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError(f"chunksize must be a positive int, got {chunksize!r}")
        batches = BatchResults(self._callbacks, callback, error_callback)
        chunks = _chunks(((tuple(item) if star else (item,), None) for item in items), chunksize)
        for index, chunk in enumerate(chunks):
            batches.add(self._submit_batch(index, func, chunk), len(chunk))
        batches.close()
        return AsyncResult(batches)

    # ------------------------------------------------------------------ imap
    def imap(self, func, iterable, chunksize=1):
        """An iterator of func(x) for x in iterable, in order; one chunk in flight per actor, the input
        read as results come back. next(timeout=) raises multiprocessing.TimeoutError."""
        self._check_running()
        return self._track(OrderedIMapIterator(self, func, iterable, chunksize))

    def imap_unordered(self, func, iterable, chunksize=1):
        """As imap, the results in the order their chunks complete."""
        self._check_running()
        return self._track(UnorderedIMapIterator(self, func, iterable, chunksize))

    def _track(self, iterator):
        self._iterators.add(iterator)
        return iterator

    # ------------------------------------------------------------------ ends
    def close(self):
        """No more submissions (they raise ValueError); the work given so far is finished (the rest of
        open imap inputs included), then the actors exit. join() waits for that."""
        if self._closed:
            return
        for iterator in list(self._iterators):
            iterator.submit_rest()
        self._closed = True
        self._slots.stop_all()

    def terminate(self):
        """Closes the pool and ends its actors now: work not done fails (ActorDiedError from get())."""
        for iterator in list(self._iterators):
            iterator.stop_submitting()
        self.close()
        self._slots.kill_all()

    def join(self):
        """Waits for the actors of a closed pool to exit. Raises ValueError if the pool was not closed."""
        if not self._closed:
            raise ValueError("Pool is still running")
        self._slots.wait_stopped()

    def __enter__(self):
        self._check_running()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.terminate()

    # ------------------------------------------------------------------ internals
    def _check_running(self):
        if self._closed:
            raise ValueError("Pool not running")

    def _actor_count(self):
        return len(self._slots)

    def _default_chunksize(self, n_items):
        chunksize, extra = divmod(n_items, len(self._slots) * 4)
        return max(1, chunksize + (1 if extra else 0))

    def _submit_batch(self, index, func, batch):
        """Sends a batch of (args, kwargs) to the actor of slot index % processes; its ref."""
        return self._slots.run_batch(index, func, batch)


def _chunks(items, size):
    """Lists of `size` items (the last may be shorter)."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _warn_context(context):
    global _context_warned
    if context is not None and not _context_warned:
        _context_warned = True
        logger.warning("Pool(context=) is ignored: processes are phalanx actors (ray_remote_args sets their "
                       "options; phalanx.init() the cluster)")
