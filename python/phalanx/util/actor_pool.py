"""ActorPool: a fixed set of actors that work through values, as Ray's
`ray.util.ActorPool` (same methods, same results).

    pool = ActorPool([Worker.remote() for _ in range(4)])
    list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4]))        # [2, 4, 6, 8]
    list(pool.map_unordered(lambda a, v: a.double.remote(v), values))    # as they finish
    pool.submit(lambda a, v: a.double.remote(v), 5); pool.get_next()     # 10

Each actor runs one of the pool's calls at a time; values wait in the pool
for a free actor."""
import time

from phalanx._private.api import get, wait
from phalanx.exceptions import GetTimeoutError


def _refs(future):
    return future if isinstance(future, list) else [future]


def _key(future):
    return tuple(r.binary() for r in future) if isinstance(future, list) else future.binary()


class ActorPool:
    def __init__(self, actors):
        self._idle_actors = list(actors)
        self._future_to_actor = {}   # ref id -> (index, actor)
        self._index_to_future = {}   # index -> ref
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending_submits = []

    def map(self, fn, values):
        """Results of fn(actor, value) for each value, in the order of `values`
        (a generator). fn must return an ObjectRef (call an actor method)."""
        return self._map(fn, values, self.get_next)

    def map_unordered(self, fn, values):
        """As map, but each result as soon as it is ready."""
        return self._map(fn, values, self.get_next_unordered)

    def _map(self, fn, values, next_result):
        self._discard_pending()
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield next_result()
        return results()

    def _discard_pending(self):
        # Results a previous map or submit left behind are dropped, not mixed into this map's, nor
        # waited for (Ray's gh-23107): their actors go back to the pool (a call sent to one queues
        # behind the dropped call on that actor).
        for index, future in list(self._index_to_future.items()):
            _, actor = self._future_to_actor.pop(_key(future))
            del self._index_to_future[index]
            self._return_actor(actor)
        self._next_return_index = self._next_task_index

    def submit(self, fn, value):
        """Runs fn(actor, value) on an idle actor, or queues it until one is free."""
        if self._idle_actors:
            actor = self._idle_actors.pop()
            future = fn(actor, value)
            self._future_to_actor[_key(future)] = (self._next_task_index, actor)
            self._index_to_future[self._next_task_index] = future
            self._next_task_index += 1
        else:
            self._pending_submits.append((fn, value))

    def has_next(self):
        """Whether results are pending."""
        return bool(self._future_to_actor)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order. TimeoutError after `timeout`
        s; with ignore_if_timedout the result is dropped (the actor goes back
        to the pool) before raising."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        future = self._index_to_future[self._next_return_index]
        timed_out = False
        if timeout is not None:
            refs = _refs(future)
            ready, _ = wait(refs, num_returns=len(refs), timeout=timeout)
            if len(ready) < len(refs):
                if not ignore_if_timedout:
                    raise GetTimeoutError(f"Timed out waiting for result after {timeout} s")
                timed_out = True
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(_key(future))
        self._return_actor(actor)
        if timed_out:
            raise GetTimeoutError(f"Timed out waiting for result after {timeout} s. The task {future!r} has "
                                  "been ignored.")
        return get(future)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """Any next result, the first to be ready."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        # A future is a ref, or a list of them (a method with num_returns > 1): ready when all are.
        owner = {ref.binary(): f for f in self._index_to_future.values() for ref in _refs(f)}
        pending = list(self._index_to_future.values())
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = wait([r for f in pending for r in _refs(f)], num_returns=1, timeout=left)
            if not ready:
                raise GetTimeoutError(f"Timed out waiting for result after {timeout} s")
            future = owner[ready[0].binary()]
            refs = _refs(future)
            if len(refs) == 1 or len(wait(refs, num_returns=len(refs), timeout=left)[0]) == len(refs):
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise GetTimeoutError(f"Timed out waiting for result after {timeout} s")
        index, actor = self._future_to_actor.pop(_key(future))
        self._return_actor(actor)
        del self._index_to_future[index]
        self._next_return_index = max(self._next_return_index, index + 1)
        return get(future)

    def _return_actor(self, actor):
        self._idle_actors.append(actor)
        if self._pending_submits:
            self.submit(*self._pending_submits.pop(0))

    def has_free(self):
        """Whether an actor is idle (and no values wait for one)."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self):
        """Removes an idle actor from the pool and returns it (None if none)."""
        return self._idle_actors.pop() if self.has_free() else None

    def push(self, actor):
        """Adds an actor to the pool."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)
