"""An actor ends when every handle of it, in every process, has gone away (Ray's rule for actors that
are not detached, named or not): the calls already made through each handle run first, then it is ended
for good (no restart) and its resources are freed.

Reference counting does the counting. The creator's handle of such an actor carries the ready object
of its creation (`ActorHandle._ready`), and so does every copy of it: a handle pickled into a task's
arguments, a put or a return carries it as a ref inside the value, so the raylets count it wherever the
handle goes, as they count any ref. Each handle is watched with a finalizer: when it is collected, its
ready ref goes to a reaper thread, which keeps it until no call from this process to that actor may
still run (the core worker knows: calls sent straight to the actor's worker until their result; while
calls go through the raylet, the last one sent, which runs after the others, until the raylet has
finished it) and then lets go of it. When the last holder anywhere has let go, the ready object is freed
on the node that created the actor, and that node ends it (`ActorManager::OnHandlesGone`).

As in Ray, handles got by name (`get_actor`) do not count, and neither do bytes made by plain `pickle`
(nothing can count where they go): a handle loaded from them after the actor ended gets ActorDiedError.

The finalizer itself only queues: it may run inside any Python code of any thread."""
import collections
import threading
import time
import weakref

from phalanx import _core
from phalanx._private import state

_released = collections.deque()  # (actor id, ready ref) of handles gone
_wake = threading.Event()
_reaper = None
_lock = threading.Lock()


def watch(handle):
    """Lets go of the handle's ready ref, once this process's calls to the actor are over, when the
    handle is collected."""
    f = weakref.finalize(handle, _on_released, handle._actor_id, handle._ready, state.info.get("client_id"))
    f.atexit = False  # (at exit this process's refs all go at once)


def _on_released(actor_id, ready_ref, client_id):
    if state.mode is None or state.info.get("client_id") != client_id:
        return  # (made by an earlier connection of this process: the ref goes with this frame)
    _released.append((actor_id, ready_ref))
    with _lock:
        global _reaper
        if _reaper is None or not _reaper.is_alive():
            _reaper = threading.Thread(target=_reap, name="phalanx-actor-reaper", daemon=True)
            _reaper.start()
    _wake.set()


def _calls_pending(actor_id):
    try:
        return _core.actor_calls_pending(actor_id)
    except Exception:  # the connection is gone (shutdown): nothing left to wait for
        return False


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
        # What stays in `waiting` keeps its ready ref; what leaves it lets go.
        waiting = [w for w in waiting if state.mode is not None and _calls_pending(w[0])]
        if waiting:
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
