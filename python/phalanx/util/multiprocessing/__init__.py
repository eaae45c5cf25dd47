"""Ray's drop-in for Python's multiprocessing.Pool (`ray.util.multiprocessing`), on phalanx actors.

    from phalanx.util.multiprocessing import Pool
    with Pool(processes=4) as pool:
        pool.map(f, range(100))                      # [f(0), f(1), ...]
        pool.apply_async(f, (1,)).get(timeout=10)
        for r in pool.imap_unordered(f, items, chunksize=8): ...

Each of the pool's processes is an actor; a call runs a batch (chunk) of items. `TimeoutError` and
`JoinableQueue` are multiprocessing's, re-exported as Ray does. See pool.py for the semantics."""
from multiprocessing import JoinableQueue, TimeoutError

from phalanx.util.multiprocessing.pool import Pool

__all__ = ["Pool", "TimeoutError", "JoinableQueue"]
