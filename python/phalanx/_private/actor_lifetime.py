"""An actor ends when its creator's last handle goes away (Ray's rule for actors that are neither named
nor detached): the calls already made from here run first, then it is ended for good (no restart) and
its resources are freed.

The creator's handle (what `Cls.remote()` returned) is watched with a finalizer. When it is collected,
the actor goes to a reaper thread, which waits until no call from this process to it may still run (the
core worker knows: calls sent straight to the actor's worker until their result; while calls go through
the raylet, the last one sent, which runs after the others, until the raylet has finished it) and then
kills it. A handle that was ever pickled (passed to a task or another actor,
returned, put) may live on elsewhere: that actor is left alone, as before, until killed or until its
creator exits.

The finalizer itself only queues: it may run inside any Python code of any thread."""
import collections
import threading
import time
import weakref

from phalanx import _core
from phalanx._private import state

_owned = set()  # actor ids whose creator's handle is watched here (and was never pickled)
_released = collections.deque()  # actor ids whose creator's handle is gone
_wake = threading.Event()
_reaper = None
_lock = threading.Lock()


def own(handle):
    """Watches the creator's handle of an unnamed, non-detached actor."""
    _owned.add(handle._actor_id)
    f = weakref.finalize(handle, _on_released, handle._actor_id, state.info.get("client_id"))
    f.atexit = False  # (at exit the whole job ends, and its actors with it)


def escaped(actor_id):
    """A handle of this actor was pickled: it may be held elsewhere, so it is never ended for going out
    of scope here."""
    _owned.discard(actor_id)


def _on_released(actor_id, client_id):
    if actor_id not in _owned:
        return  # passed on
    _owned.discard(actor_id)
    if state.mode is None or state.info.get("client_id") != client_id:
        return  # (made by an earlier connection of this process)
    _released.append(actor_id)
    with _lock:
        global _reaper
        if _reaper is None or not _reaper.is_alive():
            _reaper = threading.Thread(target=_reap, name="phalanx-actor-reaper", daemon=True)
            _reaper.start()
    _wake.set()


def _reap():
    waiting = []
    pause = 0.002
    while True:
        if not waiting:
            _wake.wait()
            pause = 0.002
        _wake.clear()
        while _released:
            waiting.append(_released.popleft())
        still = []
        for actor_id in waiting:
            if state.mode is None:
                continue
            try:
                if _core.actor_calls_pending(actor_id):
                    still.append(actor_id)
                    continue
                _core.kill_actor(actor_id, True, 10000)
            except Exception:  # the connection is gone (shutdown): nothing left to end from here
                pass
        waiting = still
        if waiting:
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
