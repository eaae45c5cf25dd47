"""Ray's task helpers in `ray.util`: `as_completed` (results as they are ready, in batches of
`chunk_size`) and `map_unordered` (a remote function over items, at most `backpressure_size` in flight)."""
from phalanx._private import api

DEFAULT_CHUNK_SIZE = 10
DEFAULT_BACKPRESSURE_SIZE = 100


def _check(chunk_size, wait_kwargs):
    if chunk_size < 1:
        raise ValueError("`chunk_size` must be >= 1")
    if "num_returns" in wait_kwargs:
        raise ValueError("Use the `chunk_size` argument instead of `num_returns`.")


def _next_batch(refs, chunk_size, yield_obj_refs, wait_kwargs):
    """(the first ready refs' values, or the refs, up to chunk_size; the refs not ready)."""
    ready, rest = api.wait(refs, num_returns=min(chunk_size, len(refs)), **wait_kwargs)
    return (ready if yield_obj_refs else api.get(ready)), rest


def as_completed(refs, *, chunk_size=DEFAULT_CHUNK_SIZE, yield_obj_refs=False, **wait_kwargs):
    """Yields the values of `refs` (or the refs, with yield_obj_refs) batch by batch as they become ready;
    `wait_kwargs` (timeout=, fetch_local=) go to each wait."""
    _check(chunk_size, wait_kwargs)
    refs = list(refs)
    while refs:
        values, refs = _next_batch(refs, chunk_size, yield_obj_refs, wait_kwargs)
        yield from values


def map_unordered(fn, items, *, backpressure_size=DEFAULT_BACKPRESSURE_SIZE, chunk_size=DEFAULT_CHUNK_SIZE,
                  yield_obj_refs=False, **wait_kwargs):
    """Yields fn.remote(item)'s results as they complete, keeping at most `backpressure_size` calls in
    flight (None: no bound)."""
    if backpressure_size is not None and backpressure_size <= 0:
        raise ValueError("backpressure_size must be positive.")
    _check(chunk_size, wait_kwargs)
    bound = float("inf") if backpressure_size is None else backpressure_size
    refs = []
    for item in items:
        refs.append(fn.remote(item))
        if len(refs) >= bound:
            values, refs = _next_batch(refs, chunk_size, yield_obj_refs, wait_kwargs)
            yield from values
    yield from as_completed(refs, chunk_size=chunk_size, yield_obj_refs=yield_obj_refs, **wait_kwargs)


__all__ = ["as_completed", "map_unordered"]
