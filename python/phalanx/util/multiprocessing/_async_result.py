"""AsyncResult: what Pool.apply_async, map_async and starmap_async return (multiprocessing's
ApplyResult/MapResult, as Ray's ray.util.multiprocessing.pool.AsyncResult)."""
from multiprocessing import TimeoutError

from phalanx.util.multiprocessing._pool_actor import Failure


class AsyncResult:
    """The result of one submission, once its batches complete. Not constructed by users."""

    def __init__(self, batches, single=False):
        self._batches = batches  # a closed BatchResults
        self._single = single

    def wait(self, timeout=None):
        """Returns once the result is ready or after `timeout` seconds (None: no limit); does not raise
        on a timeout."""
        self._batches.wait(timeout)

    def get(self, timeout=None):
        """The result (the value for apply_async, the list of values for the maps). Raises the exception
        of the first item that raised (in submission order), or the phalanx error of a batch that was
        lost (e.g. ActorDiedError after terminate()); multiprocessing.TimeoutError if not ready within
        `timeout` seconds (None: no limit)."""
        if not self._batches.wait(timeout):
            raise TimeoutError(f"the pool's result was not ready within {timeout} s")
        values = self._batches.outcomes()
        failure = next((v for v in values if isinstance(v, Failure)), None)
        if failure is not None:
            raise failure.exception()
        return values[0] if self._single else values

    def ready(self):
        """Whether the result is ready (every batch done, and the callback, if any, ran)."""
        return self._batches.done()

    def successful(self):
        """Whether no item raised. Raises ValueError if the result is not ready yet (as multiprocessing)."""
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return not self._batches.failed()
