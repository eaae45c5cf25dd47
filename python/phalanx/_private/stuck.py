"""The stuck-call report (docs/fault-tolerance.md): a call blocked longer
than PHALANX_STUCK_REPORT_S seconds (default 60; 0: never) logs once, on the
"phalanx" logger, what it waits for and where, then goes on waiting.

get and wait probe: they block up to the threshold, report what is still
missing, and block again for the rest. A generator's next() looks at the
clock between its slices. A static group's meeting cannot be entered twice,
so it is watched: a watchdog thread (started on first use, asleep while
nothing is watched) reports a watch that outlives its threshold. A static
group's calls, microseconds each, mark a Slot the watchdog looks at."""
import logging
import os
import threading
import time
import weakref

from phalanx import _core
from phalanx._private import state
from phalanx._private.rpc_tables import primary

log = logging.getLogger("phalanx")
HINT = "`phalanx stack` shows what every worker is doing."

_ms = None  # the threshold in ms (0: off), read at import and at init()


def read_threshold():
    """PHALANX_STUCK_REPORT_S, in ms (0: off); read again by init()."""
    global _ms
    try:
        _ms = int(max(0.0, float(os.environ.get("PHALANX_STUCK_REPORT_S", "60"))) * 1000)
    except ValueError:
        _ms = 60000
    return _ms


def threshold_ms():
    return _ms


read_threshold()


def _gcs():
    return primary(state.info["gcs_address"], 2.0)


def describe_waiting(ref):
    """Where the object of `ref` is, as the GCS knows it: its copies, or its task's record."""
    oid = ref.binary()
    task = oid[:16].hex()
    try:
        host, port = _gcs()
        entry = _core.redis_command(host, port, ["HGETALL", f"objdir:{oid.hex()}"], 2.0) or []
        nodes = [k.decode() if isinstance(k, bytes) else k for k in entry[0::2]]
        nodes = [k[:12] for k in nodes if k != "size" and not k.startswith(("srv:", "cmp:"))]
        if nodes:
            return f"copies on node(s) {', '.join(nodes)} (being fetched)"
        alive = sum(1 for n in _core.gcs_nodes(host, port, 2.0) if n["alive"])
        return f"no copy anywhere yet: task {task[:12]} has not finished ({alive} nodes alive)"
    except Exception as e:  # (the report is best effort: the GCS may be away)
        return f"task {task[:12]}; the GCS could not say more ({e})"


def report(call, refs, waiting, after_s, noun="objects"):
    """Logs once that `call` has been blocked `after_s` seconds on the refs
    (or generators: their completion ref is described) marked in `waiting`."""
    pending = [r for r, w in zip(refs, waiting) if w]
    first = pending[0]
    log.warning("phalanx.%s has waited %.0f s for %d of %d %s (still waiting); the first is %r: %s. %s", call,
                after_s, len(pending), len(refs), noun, first, describe_waiting(getattr(first, "_ref", first)), HINT)


def arrived_ranks(key):
    """The ranks that have arrived at a static group's rendezvous `key` (as the GCS holds it)."""
    host, port = _gcs()
    keys = _core.redis_command(host, port, ["HKEYS", f"rdv:{key}"], 2.0) or []
    return sorted(int(k.decode() if isinstance(k, bytes) else k) for k in keys)


# The watchdog: token -> [when to report (monotonic s), started, describe() -> str]
_watches = {}
_lock = threading.Lock()
_wake = threading.Condition(_lock)
_thread = None
_next_token = 0


class watch:
    """`with watch(describe):` logs describe(waited_s) once if the block is
    still running after the threshold. Free while the threshold is 0."""
    __slots__ = ("token",)

    def __init__(self, describe):
        global _thread, _next_token
        self.token = None
        if not _ms:
            return
        now = time.monotonic()
        with _lock:
            _next_token += 1
            self.token = _next_token
            _watches[self.token] = [now + _ms / 1000, now, describe]
            if _thread is None:
                _thread = threading.Thread(target=_watchdog, name="phalanx-stuck-report", daemon=True)
                _thread.start()
            elif len(_watches) == 1:
                _wake.notify()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.token is not None:
            with _lock:
                _watches.pop(self.token, None)
        return False


class Slot:
    """A watch for calls made one after another (each static group's): a
    call marks it busy (`since = time.monotonic()`) and idle (`since =
    None`), no lock and no allocation, so calls of a few microseconds can
    afford it. The watchdog looks at every slot each quarter of the
    threshold and reports a call busy past it once: describe(waited)."""
    __slots__ = ("describe", "since", "reported", "__weakref__")

    def __init__(self, describe):
        global _thread
        self.describe, self.since, self.reported = describe, None, None
        if not _ms:
            return
        with _lock:
            _slots.add(self)
            if _thread is None:
                _thread = threading.Thread(target=_watchdog, name="phalanx-stuck-report", daemon=True)
                _thread.start()
            else:
                _wake.notify()


_slots = weakref.WeakSet()  # guarded by _lock


def _due_slots(now):
    """The slots busy past the threshold and not yet reported: (waited, describe)."""
    due = []
    for slot in list(_slots):
        since = slot.since
        if since is not None and now - since >= _ms / 1000 and slot.reported != since:
            slot.reported = since
            due.append((now - since, slot.describe))
    return due


def _watchdog():
    while True:
        due = []
        with _lock:
            while not _watches and not _slots:
                _wake.wait()
            now = time.monotonic()
            first = min((w[0] for w in _watches.values()), default=float("inf"))
            if _slots:
                due = _due_slots(now)
                first = min(first, now + max(0.05, _ms / 4000))
            if first > now and not due:
                _wake.wait(first - now)
                continue
            for token, w in list(_watches.items()):
                if w[0] <= now:
                    due.append((now - w[1], w[2]))
                    del _watches[token]  # (once)
        for waited, describe in due:
            try:
                log.warning("%s (still waiting). %s", describe(waited), HINT)
            except Exception as e:  # noqa: BLE001 - a report must never break the call it watches
                log.warning("a call has waited %.0f s; describing it failed: %s", waited, e)


# `phalanx stack` for drivers: workers write their stacks to their logs on
# SIGUSR1; a driver's stderr is the user's terminal, so it writes them to a
# file of its own in the session's logs folder instead.
_stack_file = None


def driver_stack_path(session_dir, pid):
    return os.path.join(session_dir, "logs", f"driver-{pid}.stack")


def offer_driver_stacks(session_dir):
    """Lets `phalanx stack` read this driver's stacks: SIGUSR1 makes
    faulthandler write every thread's to SESSION/logs/driver-PID.stack. Only
    where SIGUSR1 is this process's to take (no handler of the program's own)."""
    global _stack_file
    import faulthandler
    import signal
    if _stack_file is not None or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
        return
    try:
        f = open(driver_stack_path(session_dir, os.getpid()), "a")
    except OSError:
        return  # (no logs folder here: no stacks, nothing else lost)
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
    _stack_file = f


def withdraw_driver_stacks():
    """At shutdown: SIGUSR1 back to its default, the stack file gone."""
    global _stack_file
    import faulthandler
    import signal
    if _stack_file is None:
        return
    f, _stack_file = _stack_file, None
    faulthandler.unregister(signal.SIGUSR1)
    try:
        os.unlink(f.name)
    except OSError:
        pass
    f.close()
