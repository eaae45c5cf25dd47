"""A worker's sys.stdout and sys.stderr. What a task or actor prints goes to the worker's log file, as
before, and each whole line also to the driver of the job it works for (Ray's log_to_driver), tagged with
the function's or the actor class's name: the raylet adds the pid and the node's address and appends the
lines to the job's stream in the GCS (scheduler/output_relay.h), which the driver prints
(log_stream.py). A line waits for its end ("\\n"), a flush, or the end of the task. What the process writes
to its file descriptors directly (C extensions, subprocesses) reaches the log file only: docs/ray_compat.md."""
import io
import threading

from phalanx import _core

_MAX_PARTIAL = 64 * 1024  # a line longer than this goes on without waiting for its end


class DriverTee(io.TextIOBase):
    """Wraps the worker's `stream` (sys.stdout or sys.stderr). `whose()` says whom the calling thread
    prints for: (job id, source name), or None (nothing is forwarded: a worker between tasks)."""

    def __init__(self, stream, is_err, whose):
        super().__init__()
        self._stream = stream
        self._is_err = is_err
        self._whose = whose
        self._lock = threading.Lock()
        self._partial = {}  # (job id, source) -> the start of a line not ended yet
        self._sending = threading.local()  # (a failure to send that prints must not send again)

    def write(self, s):
        n = self._stream.write(s)
        if s and not getattr(self._sending, "on", False):
            who = self._whose()
            if who is not None:
                self._forward(who, s)
        return n

    def flush(self):
        self._stream.flush()
        with self._lock:
            pending, self._partial = self._partial, {}
        for who, text in pending.items():
            self._send(who, text + "\n")

    def _forward(self, who, s):
        with self._lock:
            text = self._partial.pop(who, "") + s
            end = text.rfind("\n") + 1
            if end == 0 and len(text) < _MAX_PARTIAL:
                self._partial[who] = text
                return
            if end == 0:
                end = len(text)
            elif end < len(text):
                self._partial[who] = text[end:]
        whole = text[:end]
        self._send(who, whole if whole.endswith("\n") else whole + "\n")

    def _send(self, who, text):
        self._sending.on = True
        try:
            _core.send_output(who[0], who[1], self._is_err, text.encode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - the raylet is gone: the log file has it; a print never fails for it
            pass
        finally:
            self._sending.on = False

    # The rest is the wrapped stream's: fileno() (faulthandler, subprocess), encoding, isatty(), buffer, ...
    def fileno(self):
        return self._stream.fileno()

    def isatty(self):
        return self._stream.isatty()

    @property
    def encoding(self):
        return self._stream.encoding

    @property
    def errors(self):
        return self._stream.errors

    @property
    def buffer(self):
        return self._stream.buffer

    def writable(self):
        return True

    def __getattr__(self, name):
        return getattr(self.__dict__["_stream"], name)


def end_of_task():
    """What the task printed without ending its line goes to the driver now (Ray's does too: its log monitor
    reads the worker's file), not with whatever the next task prints."""
    import sys
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, DriverTee) and stream._partial:
            stream.flush()


def install(whose):
    """Makes sys.stdout and sys.stderr of this worker DriverTees (once)."""
    import sys
    if not isinstance(sys.stdout, DriverTee):
        sys.stdout = DriverTee(sys.stdout, False, whose)
    if not isinstance(sys.stderr, DriverTee):
        sys.stderr = DriverTee(sys.stderr, True, whose)
