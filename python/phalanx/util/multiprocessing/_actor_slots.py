"""The actors of a Pool, one per slot, and their ends.

An actor is retired after the last batch it is given: a ping sent after that batch marks when its work
is done, and then the pool lets go of its handle, so phalanx ends it (an actor ends when every handle of
it has gone, after the calls made through them). That happens to a slot's actor after maxtasksperchild
batches (a new actor takes the slot) and to every actor at stop_all() (close()); kill_all()
(terminate()) ends them now. Ray's pool stops its actors with __ray_terminate__; phalanx's exit_actor()
may lose the results of the calls just before it (docs/ray_compat.md), so this does not use it.
Thread-safe (a lock around the slots): batches come from the pool's caller, imap's consumer and callbacks;
the markers complete on phalanx's ref-waiter thread."""
import logging
import threading

import phalanx
from phalanx.exceptions import ActorDiedError, NotFoundError

logger = logging.getLogger(__name__)

START_REPORT_S = 60.0  # a pool whose actors are not all up by then says so (and keeps waiting)


class ActorSlots:
    def __init__(self, actor_class, count, initializer, initargs, maxtasksperchild):
        self._new = lambda: actor_class.remote(initializer, initargs)
        self._max_batches = maxtasksperchild
        self._lock = threading.Lock()
        self._actors = [self._new() for _ in range(count)]
        self._batches_run = [0] * count
        self._retiring = {}  # marker id -> (actor, marker ref): actors whose last batch is not done
        self._wait_started()

    def _wait_started(self):
        """Until every actor's constructor (the initializer) ran; raises its error if one failed."""
        pings = [a.ping.remote() for a in self._actors]
        _, waiting = phalanx.wait(pings, num_returns=len(pings), timeout=START_REPORT_S)
        if waiting:
            logger.warning("Pool: %d of %d actors not started after %.0f s (their resources, see ray_remote_args, "
                           "may not be free); waiting on", len(waiting), len(pings), START_REPORT_S)
        phalanx.get(pings)

    def __len__(self):
        return len(self._actors)

    def run_batch(self, index, func, batch):
        """Sends `batch` to the actor of slot index % len(self); the ref of its list of outcomes. Raises
        ValueError after stop_all()."""
        retired = None
        with self._lock:
            if not self._actors:
                raise ValueError("Pool not running")
            index %= len(self._actors)
            ref = self._actors[index].run_batch.remote(func, batch)
            self._batches_run[index] += 1
            if self._max_batches is not None and self._batches_run[index] >= self._max_batches:
                retired = self._retire(self._actors[index])
                self._actors[index] = self._new()
                self._batches_run[index] = 0
        self._release_when_done(retired)
        return ref

    def stop_all(self):
        """Every actor ends after the batches it was given; the pool has no actor afterwards."""
        with self._lock:
            markers = [self._retire(a) for a in self._actors]
            self._actors = []
        for marker in markers:
            self._release_when_done(marker)

    def kill_all(self):
        """Every actor, retiring ones included, ends now; its batches not done fail with ActorDiedError."""
        with self._lock:
            actors = list(self._actors) + [a for a, _ in self._retiring.values()]
        for actor in actors:
            try:
                phalanx.kill(actor)
            except (ActorDiedError, NotFoundError):
                pass  # (it already ended)

    def wait_stopped(self, timeout=None):
        """Until the work of every retiring actor is done (each then ends) or `timeout` seconds (None: no
        limit); whether it all is."""
        with self._lock:
            markers = [m for _, m in self._retiring.values()]
        if not markers:
            return True
        _, left = phalanx.wait(markers, num_returns=len(markers), timeout=timeout)
        return not left

    def _retire(self, actor):
        """REQUIRES: the lock. Sends the marker; the actor stays in _retiring until it is done."""
        marker = actor.ping.remote()
        self._retiring[marker.binary()] = (actor, marker)
        return marker

    def _release_when_done(self, marker):
        """Outside the lock (a future already done runs its callback here)."""
        if marker is not None:
            key = marker.binary()
            marker.future().add_done_callback(lambda _: self._release(key))

    def _release(self, key):
        with self._lock:
            self._retiring.pop(key, None)  # the last handle: phalanx ends the actor
