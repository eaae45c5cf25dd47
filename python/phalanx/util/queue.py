"""A first-in first-out queue shared by tasks and actors, as Ray's
`ray.util.queue.Queue`: an asyncio actor holds the items.

    from phalanx.util.queue import Queue, Empty, Full
    q = Queue(maxsize=100)
    q.put(item); q.put(item, timeout=1.0)      # Full when no room in time
    q.get(); q.get(block=False)                 # Empty when nothing came
    q.put_nowait_batch([1, 2]); q.get_nowait_batch(2)

Pass the Queue itself to tasks and actors: every copy talks to the same actor."""
import asyncio
import queue as _stdlib_queue

import phalanx
from phalanx.exceptions import TaskError


class Empty(_stdlib_queue.Empty):
    pass


class Full(_stdlib_queue.Full):
    pass


class _QueueActor:
    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.queue = asyncio.Queue(maxsize)

    def qsize(self):
        return self.queue.qsize()

    def empty(self):
        return self.queue.empty()

    def full(self):
        return self.queue.full()

    async def put(self, item, timeout=None):
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full(f"the queue is full (maxsize {self.maxsize}) and stayed so for {timeout} s") from None

    async def get(self, timeout=None):
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty(f"the queue stayed empty for {timeout} s") from None

    def put_nowait(self, item):
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            raise Full(f"the queue is full (maxsize {self.maxsize})") from None

    def put_nowait_batch(self, items):
        if self.maxsize > 0 and len(items) + self.qsize() > self.maxsize:
            raise Full(f"cannot add {len(items)} items to the queue: {self.qsize()} of {self.maxsize} are taken")
        for item in items:
            self.queue.put_nowait(item)

    def get_nowait(self):
        try:
            return self.queue.get_nowait()
        except asyncio.QueueEmpty:
            raise Empty("the queue is empty") from None

    def get_nowait_batch(self, num_items):
        if num_items > self.qsize():
            raise Empty(f"cannot get {num_items} items from the queue: it holds {self.qsize()}")
        return [self.queue.get_nowait() for _ in range(num_items)]


def _plain(e):
    """The actor's Empty/Full (a TaskError) as the plain class, else `e`."""
    if isinstance(e, Empty):
        return Empty(str(e.cause))
    if isinstance(e, Full):
        return Full(str(e.cause))
    return e


def _unwrap(call):
    try:
        return phalanx.get(call)
    except TaskError as e:
        raise _plain(e) from None


async def _unwrap_async(call):
    try:
        return await call
    except TaskError as e:
        raise _plain(e) from None


class Queue:
    """maxsize <= 0: unbounded. actor_options: options of the queue's actor
    (num_cpus, resources, name, ...)."""

    def __init__(self, maxsize=0, actor_options=None):
        if isinstance(maxsize, bool) or not isinstance(maxsize, int):
            raise TypeError(f"maxsize must be an int, got {maxsize!r}")
        self.maxsize = maxsize
        options = dict(actor_options or {})
        self.actor = phalanx.remote(**options)(_QueueActor).remote(maxsize) if options else \
            phalanx.remote(_QueueActor).remote(maxsize)

    def __len__(self):
        return self.size()

    def size(self):
        return phalanx.get(self.actor.qsize.remote())

    qsize = size

    def empty(self):
        return phalanx.get(self.actor.empty.remote())

    def full(self):
        return phalanx.get(self.actor.full.remote())

    def put(self, item, block=True, timeout=None):
        """Adds an item; with block, waits up to `timeout` s (None: for ever)
        for room, then raises Full."""
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        if not block:
            return _unwrap(self.actor.put_nowait.remote(item))
        return _unwrap(self.actor.put.remote(item, timeout))

    async def put_async(self, item, block=True, timeout=None):
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        return await _unwrap_async(self.actor.put.remote(item, timeout) if block else
                                   self.actor.put_nowait.remote(item))

    def get(self, block=True, timeout=None):
        """Removes and returns an item; with block, waits up to `timeout` s
        (None: for ever) for one, then raises Empty."""
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        if not block:
            return _unwrap(self.actor.get_nowait.remote())
        return _unwrap(self.actor.get.remote(timeout))

    async def get_async(self, block=True, timeout=None):
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        return await _unwrap_async(self.actor.get.remote(timeout) if block else self.actor.get_nowait.remote())

    def put_nowait(self, item):
        return self.put(item, block=False)

    def put_nowait_batch(self, items):
        if not isinstance(items, list):
            raise TypeError("put_nowait_batch takes a list of items")
        return _unwrap(self.actor.put_nowait_batch.remote(items))

    def get_nowait(self):
        return self.get(block=False)

    def get_nowait_batch(self, num_items):
        if isinstance(num_items, bool) or not isinstance(num_items, int) or num_items < 0:
            raise ValueError("'num_items' must be a non-negative integer")
        return _unwrap(self.actor.get_nowait_batch.remote(num_items))

    def shutdown(self, force=False, grace_period_s=5):
        """Ends the queue's actor (its items go with it)."""
        if self.actor is not None:
            phalanx.kill(self.actor)
        self.actor = None
