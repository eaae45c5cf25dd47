"""Ray's `ray.experimental.tqdm_ray`: progress bars in tasks and actors, shown by the driver.

`tqdm(iterable=None, desc=None, total=None, unit=None, position=None, flush_interval_s=None)` with tqdm's
`update`, `set_description`, `refresh`, `close`, `n`, `total` and iteration, as Ray's. In a task or actor a bar
sends its state at most every `flush_interval_s` (1 s by default; always at close) as one line of what the
worker prints (a JSON object with Ray's magic token); the driver's log stream (phalanx/_private/log_stream.py)
recognizes such a line and shows the bar's state, `(f pid=12) work: 40%|####      | 4/10 it`, instead of the
JSON (nor is it counted as a repeat). In the driver the state is printed at once, to stderr. Ray draws the
bars in place with the tqdm package; phalanx prints a line per state sent: logs stay readable, and nothing
needs a terminal."""
import json
import os
import socket
import sys
import time
import uuid
from typing import Any, Dict, Iterable, Optional

# Ray's token that marks a bar's state among a worker's lines.
RAY_TQDM_MAGIC = "__ray_tqdm_magic_token__"
_PREFIX = '{"__magic_token__": "' + RAY_TQDM_MAGIC + '"'


def safe_print(*args, **kwargs):
    """Ray's print that keeps its bars intact; phalanx's bars are lines of their own, so it is print."""
    print(*args, **kwargs)


def _in_worker():
    from phalanx._private import state
    return state.mode == "worker"


class tqdm:
    """Ray's distributed tqdm (a subset of tqdm's arguments, as Ray's)."""

    DEFAULT_FLUSH_INTERVAL_SECONDS = 1.0

    def __init__(self, iterable: Optional[Iterable] = None, desc: Optional[str] = None,
                 total: Optional[int] = None, unit: Optional[str] = None, position: Optional[int] = None,
                 flush_interval_s: Optional[float] = None):
        if total is None and iterable is not None:
            try:
                total = len(iterable)
            except (TypeError, AttributeError):
                total = None
        self._iterable = iterable
        self._desc = desc or ""
        self._total = total
        self._unit = unit or "it"
        self._pos = position or 0
        self._uuid = uuid.uuid4().hex
        self._x = 0
        self._closed = False
        self._flush_interval_s = self.DEFAULT_FLUSH_INTERVAL_SECONDS if flush_interval_s is None \
            else flush_interval_s
        self._last_flush_time = 0.0

    def set_description(self, desc):
        self._desc = desc
        self._dump_state()

    def update(self, n=1):
        self._x += n
        self._dump_state()

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._dump_state(force_flush=True)

    def refresh(self):
        self._dump_state()

    @property
    def total(self) -> Optional[int]:
        return self._total

    @total.setter
    def total(self, total: int):
        self._total = total

    @property
    def n(self) -> int:
        return self._x

    @n.setter
    def n(self, n: int):
        self._x = n

    def __iter__(self):
        if self._iterable is None:
            raise ValueError("No iterable provided")
        for x in iter(self._iterable):
            self.update(1)
            yield x
        self.close()  # (as tqdm's: the bar ends with its iterable)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _dump_state(self, force_flush=False):
        now = time.time()
        if not force_flush and now - self._last_flush_time < self._flush_interval_s:
            return
        self._last_flush_time = now
        if _in_worker():
            print(json.dumps(self._get_state()), flush=True)  # (to the driver, as the worker's other lines)
        else:
            print(render(self._get_state()), file=sys.stderr, flush=True)

    def _get_state(self) -> Dict[str, Any]:
        return {"__magic_token__": RAY_TQDM_MAGIC, "x": self._x, "pos": self._pos, "desc": self._desc,
                "total": self._total, "unit": self._unit, "ip": _node_ip(), "pid": os.getpid(),
                "uuid": self._uuid, "closed": self._closed}


def _node_ip():
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def parse(line):
    """A bar's state if `line` is one (a worker's printed JSON with Ray's token), else None."""
    if not line.startswith(_PREFIX):
        return None
    try:
        state = json.loads(line)
    except ValueError:
        return None
    return state if isinstance(state, dict) and state.get("__magic_token__") == RAY_TQDM_MAGIC else None


def render(state, width=10):
    """One line for a bar's state: `desc: 40%|####      | 4/10 it` (`desc: 4 it` without a total)."""
    desc = f"{state.get('desc')}: " if state.get("desc") else ""
    x, total, unit = state.get("x", 0), state.get("total"), state.get("unit", "it")
    if isinstance(total, (int, float)) and total > 0:
        frac = min(max(x / total, 0.0), 1.0)
        filled = int(frac * width)
        line = f"{desc}{frac * 100:3.0f}%|{'#' * filled}{' ' * (width - filled)}| {x}/{total} {unit}"
    else:
        line = f"{desc}{x} {unit}"
    return line + (" (done)" if state.get("closed") else "")
