"""The driver's side of Ray's log_to_driver: what the job's tasks and actors print, on any node, printed
here as Ray prints it: `(f pid=123) line`, `(Actor pid=123, ip=10.0.0.2) line` for another node's, the
worker's stderr to this process's stderr. The lines come from the job's stream in the GCS ("output:<job
hex>", written by each node's raylet: scheduler/output_relay.h), read by a thread of this process.

Lines that several processes print alike (words with digits aside) are printed once at first and then
counted for 5 s: `line [repeated 9x across cluster]`, as Ray's log deduplication does
(PHALANX_DEDUP_LOGS=0, or Ray's RAY_DEDUP_LOGS=0, turns it off)."""
import os
import re
import sys
import threading
import time

from phalanx import _core
from phalanx._private.rpc_tables import all_nodes
from phalanx.experimental import tqdm_ray

_KEY_PREFIX = "output:"  # (gcs/gcs_tables.h kOutputPrefix)
_POLL_S = 0.1  # how often the thread reads the stream (a non-blocking XREAD, then a wait in Python)
_NUMBERS = re.compile(r"(\d+|0x[0-9a-fA-F]+)")


def dedup_enabled():
    for var in ("PHALANX_DEDUP_LOGS", "RAY_DEDUP_LOGS"):
        if os.environ.get(var) is not None:
            return os.environ[var] not in ("0", "false", "False", "")
    return True


def _canonical(line):
    """A line with its words that hold numbers left out: what tells repeats apart from news."""
    return " ".join(w for w in line.split() if not _NUMBERS.search(w))


class Deduplicator:
    """Ray's rule: a line is printed the first time; the same line (canonically) from another process
    within `window_s` is counted instead, and the count printed once the window ends."""

    def __init__(self, window_s=5.0, clock=time.monotonic):
        self._window = window_s
        self._clock = clock
        self._recent = {}  # canonical line -> [first seen, count, last line, last prefix, is_err, sources]

    def take(self, prefix, source_key, line, is_err):
        """Returns the (prefix, line, is_err) to print now: the line itself, or nothing (counted)."""
        key = _canonical(line)
        if not key:
            return [(prefix, line, is_err)]
        seen = self._recent.get(key)
        if seen is None:
            self._recent[key] = [self._clock(), 0, line, prefix, is_err, {source_key}]
            return [(prefix, line, is_err)]
        seen[5].add(source_key)
        if len(seen[5]) == 1:  # the same process again: news every time
            return [(prefix, line, is_err)]
        seen[1] += 1
        seen[2], seen[3], seen[4] = line, prefix, is_err
        return []

    def due(self, everything=False):
        """The counts whose window ended (all of them with `everything`), as lines to print."""
        now = self._clock()
        out = []
        for key, (first, count, line, prefix, is_err, _) in list(self._recent.items()):
            if everything or now - first >= self._window:
                del self._recent[key]
                if count:
                    out.append((prefix, f"{line} [repeated {count}x across cluster]", is_err))
        return out


def prefix_of(source, pid, ip, local_ip):
    where = f"pid={pid}" if ip == local_ip or not ip else f"pid={pid}, ip={ip}"
    return f"({source} {where})" if source else f"({where})"


class LogFollower:
    """Prints what the job `job_id` prints on the cluster whose GCS is at `gcs_address`, from a daemon
    thread, until stop(). A GCS that goes away is waited for (the thread tries again each second)."""

    def __init__(self, gcs_address, job_id, node_id, out=None, err=None, dedup=None):
        self._session = _core.RedisSession(gcs_address, 5.0)
        self._gcs_address = gcs_address
        self._key = _KEY_PREFIX + job_id.hex()
        self._node_id = node_id.hex()
        self._local_ip = None  # this node's address (lines from it show no ip), read by the thread
        self._out = out
        self._err = err
        self._dedup = Deduplicator() if (dedup_enabled() if dedup is None else dedup) else None
        self._told_dedup = False
        self._last = "0-0"
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one reader at a time (the thread, or stop()'s last read)
        self._thread = threading.Thread(target=self._run, name="phalanx-log-to-driver", daemon=True)
        self._thread.start()

    def stop(self):
        """Ends the thread (it waits in Python, not in a blocking read, so it ends at once: a thread left
        inside C++ at the interpreter's exit would abort the process), then prints what is in the
        stream now and the counts still held back."""
        self._stop.set()
        self._thread.join(5.0)
        with self._lock:
            try:
                self._show(self._read(self._session, None))
            except Exception:  # noqa: BLE001 - the GCS is gone with the cluster: nothing more to read
                pass
            if self._dedup:
                self._print(self._dedup.due(everything=True))

    def _run(self):
        while not self._stop.is_set():
            try:
                with self._lock:
                    entries = self._read(self._session, None)  # (no BLOCK: a round trip, then a wait here)
                    self._show(entries)
                    if self._dedup:
                        self._print(self._dedup.due())
                self._stop.wait(_POLL_S)
            except Exception:  # noqa: BLE001 - the GCS is away: try again
                self._stop.wait(1.0)

    def _read(self, session, block_ms):
        """The stream's entries after the last shown (blocking up to `block_ms`; None: not at all)."""
        args = ["XREAD", "COUNT", "1000"] + (["BLOCK", str(block_ms)] if block_ms is not None else []) + \
            ["STREAMS", self._key, self._last]
        reply = session.command(args, timeout_s=5.0 + (block_ms or 0) / 1000)
        return reply[0][1] if reply else []

    def _show(self, entries):
        if entries and self._local_ip is None:
            self._local_ip = next((n["address"] for n in all_nodes(self._gcs_address)
                                   if n["node_id"] == self._node_id), "")
        for entry_id, fields in entries:
            self._last = entry_id.decode()
            f = dict(zip(fields[::2], fields[1::2]))
            prefix = prefix_of(f.get(b"src", b"").decode("utf-8", "replace"), f.get(b"pid", b"?").decode(),
                               f.get(b"ip", b"").decode(), self._local_ip)
            is_err = f.get(b"err") == b"1"
            source_key = (f.get(b"ip"), f.get(b"pid"))
            lines = []
            for line in f.get(b"text", b"").decode("utf-8", "replace").splitlines():
                bar = tqdm_ray.parse(line)
                if bar is not None:  # a progress bar's state (phalanx.experimental.tqdm_ray): shown, never counted
                    lines.append((prefix, tqdm_ray.render(bar), True))
                elif self._dedup:
                    lines += self._dedup.take(prefix, source_key, line, is_err)
                else:
                    lines.append((prefix, line, is_err))
            self._print(lines)

    def _print(self, lines):
        if not lines:
            return
        out = self._out or sys.stdout
        err = self._err or sys.stderr
        for prefix, line, is_err in lines:
            if "[repeated" in line and not self._told_dedup:
                self._told_dedup = True
                print("(phalanx) lines repeated across workers are printed once and counted; "
                      "PHALANX_DEDUP_LOGS=0 prints every one", file=err)
            print(f"{prefix} {line}", file=err if is_err else out)
        try:
            out.flush()
            err.flush()
        except Exception:  # noqa: BLE001 - a closed stream at exit
            pass
