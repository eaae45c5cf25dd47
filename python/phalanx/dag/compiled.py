"""The driver's side of a compiled graph (Ray's Compiled Graphs API).

Compiling sends each actor of the graph one long call (loop.py) and forms a
channel group with them (the static groups' connections: a Unix socket
between processes of one node, TCP between nodes, authenticated, TLS under
--tls); the driver is rank 0. `execute(*args)` sends the input to the
actors that read it and returns at once (several executions are in flight,
up to `_max_inflight_executions`); `get(ref)` reads the outputs in order,
keeping those of executions not asked for yet. No task is submitted per
execution: no raylet, GCS or object store on its path."""

import collections
import os
import threading
import time
import uuid
import weakref

from phalanx import _core
from phalanx._private import api, collective_group
from phalanx.dag import plan as _plan
from phalanx.dag import wire
from phalanx.dag.loop import LOOP_METHOD
from phalanx.dag.context import DAGContext
from phalanx.exceptions import ActorDiedError, CollectiveError, GetTimeoutError, PhalanxError, RayChannelTimeoutError

DEFAULT_MAX_INFLIGHT = 10
DEFAULT_SUBMIT_TIMEOUT = 10.0
COMPILE_TIMEOUT = 60.0


class CompiledGraphClosedError(CollectiveError):
    """`execute` on a compiled graph after `teardown()`, or after one of its actors died."""


class CompiledDAGRef:
    """The result of one output of one execution: `phalanx.get(ref)` or
    `ref.get()`, once."""
    __slots__ = ("_dag", "_execution", "_output", "_taken", "__weakref__")

    def __init__(self, dag, execution, output):
        self._dag, self._execution, self._output, self._taken = dag, execution, output, False

    def get(self, timeout=None):
        if self._taken:
            raise ValueError(f"the result of execution {self._execution} was got already: get() takes a "
                             "CompiledDAGRef's result once")
        value = self._dag._result(self._execution, self._output, timeout)
        self._taken = True
        if isinstance(value, wire.Raised):
            raise value.error
        return value

    def __del__(self):
        if not self._taken and self._dag is not None:
            self._dag._release(self._execution, self._output)

    def __repr__(self):
        return f"CompiledDAGRef(execution {self._execution}, output {self._output})"

    def __reduce__(self):
        raise TypeError("a CompiledDAGRef cannot leave the process that executed the graph: get() its value there")


class CompiledDAG:
    def __init__(self, root, max_inflight=None, submit_timeout=None):
        if max_inflight is not None and (not isinstance(max_inflight, int) or max_inflight < 1):
            raise ValueError(f"_max_inflight_executions must be a positive int, got {max_inflight!r}")
        if submit_timeout is not None and not submit_timeout > 0:
            raise ValueError(f"_submit_timeout must be a positive number of seconds, got {submit_timeout!r}")
        self._plan = _plan.build(root)
        self._first = [self._plan.outputs.index(o) for o in self._plan.outputs]  # where each output is read
        context = DAGContext.get_current()  # (Ray's defaults, which a program may have changed)
        self._max_inflight = max_inflight or context.max_inflight_executions or DEFAULT_MAX_INFLIGHT
        self._submit_timeout = submit_timeout or context.submit_timeout or DEFAULT_SUBMIT_TIMEOUT
        self._id = uuid.uuid4().hex
        self._lock = threading.RLock()
        self._next = 1        # the next execution's number
        self._read = 1        # the first execution whose outputs are not all read
        self._partial = {}    # output position -> value, of execution self._read
        self._results = {}    # execution -> {output position: value} read and not got yet
        self._dropped = {}    # execution -> output positions whose refs are gone unread
        self._released = collections.deque()  # (execution, output) of refs dropped unread, not yet applied
        self._closed = None   # why the graph runs no more (teardown, or a rank gone)
        self._channel = None
        self._loops = []
        api.ensure_initialized()
        self._start()
        self._finalizer = weakref.finalize(self, CompiledDAG._abandon, self._channel)

    # ---- compile ----

    def _start(self):
        p = self._plan
        group = f"dag-{os.urandom(8).hex()}"
        started = time.monotonic()
        for prog, actor in zip(p.programs, p.actors):
            self._loops.append(getattr(actor, LOOP_METHOD).remote(group, prog.rank, p.world, prog, COMPILE_TIMEOUT))
        channel = _core.open_group(group, 0, p.world)
        me = collective_group.arrival(0, p.world, channel, "driver")
        # The meeting runs on a thread while this one watches the loop calls: an
        # actor that is dead (or dies) ends the compile at once, naming it.
        met = {}

        def meet():
            try:
                met["names"] = collective_group.meet(group, p.world, me, channel, COMPILE_TIMEOUT, started)[1]
            except BaseException as e:  # noqa: BLE001 - handed to the compiling thread
                met["error"] = e
        thread = threading.Thread(target=meet, name="phalanx-dag-compile", daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.05)
                self._raise_loop_failure()
        except BaseException as e:
            channel.close()
            # The ranks that did not come are met for, so the others' loops end now.
            ended, _ = api.wait(self._loops, num_returns=len(self._loops), timeout=0)
            collective_group.abandon(group, p.world, [self._loops.index(r) + 1 for r in ended],
                                     f"compiling the graph failed: {e}")
            raise
        if "error" in met:
            channel.close()
            e = met["error"]
            if isinstance(e, GetTimeoutError):
                raise GetTimeoutError(f"compiling the graph: {e}") from None
            raise e
        self._names = met["names"]
        self._channel = channel

    def _raise_loop_failure(self):
        """The error of an actor whose loop call ended before the graph formed (it died, or could not join)."""
        ready, _ = api.wait(self._loops, num_returns=len(self._loops), timeout=0)
        for ref in ready:
            actor = self._plan.actors[self._loops.index(ref)]
            try:
                api.get(ref, timeout=0)
            except PhalanxError as e:
                raise type(e)(f"compiling the graph: actor {actor._class_name} ({actor._actor_id.hex()[:12]}) "
                              f"could not join it: {e}") from None
            raise ActorDiedError(f"compiling the graph: the loop of actor {actor._class_name} "
                                 f"({actor._actor_id.hex()[:12]}) ended before the graph formed")

    def get_id(self):
        """This compiled graph's id (a hex string, Ray's CompiledDAG.get_id)."""
        return self._id

    async def execute_async(self, *args, **kwargs):
        """execute() for asyncio programs: awaiting it starts the execution (off the event loop); what it
        returns is awaited for the value (`fut = await dag.execute_async(x); value = await fut`)."""
        import asyncio
        loop = asyncio.get_running_loop()
        refs = await loop.run_in_executor(None, lambda: self.execute(*args, **kwargs))
        return _AwaitableResult(refs)

    # ---- executions ----

    def execute(self, *args, **kwargs):
        """Starts one execution with these arguments (the InputNode's value):
        its CompiledDAGRef (a list of them for a MultiOutputNode). With
        `_max_inflight_executions` in flight, it first reads the oldest's
        outputs (kept for its get); GetTimeoutError naming the bound if they
        do not come within `_submit_timeout`."""
        with self._lock:
            self._check_open()
            while self._next - self._read >= self._max_inflight:
                try:
                    self._read_one(self._submit_timeout)
                except GetTimeoutError as e:
                    raise RayChannelTimeoutError(
                        f"{self._next - self._read} executions of this compiled graph are in flight "
                        f"(_max_inflight_executions={self._max_inflight}) and the oldest (execution {self._read}) "
                        f"did not finish within _submit_timeout={self._submit_timeout} s: {e}") from None
            execution = self._next
            body = wire.dumps_or_raise((args, kwargs), "execute()'s arguments")
            for slot, rank in self._plan.inputs:
                self._send(_plan.call_of(execution, slot), body, rank)
            self._next += 1
        refs = [CompiledDAGRef(self, execution, i) for i in range(len(self._plan.outputs))]
        return refs if self._plan.multi else refs[0]

    def _check_open(self):
        if self._closed is not None:
            raise CompiledGraphClosedError(f"this compiled graph runs no more: {self._closed}")

    def _send(self, call, body, rank, what=wire.WHAT):
        try:
            self._channel.send_bytes(call, what, body, rank, int(self._submit_timeout * 1000))
        except CollectiveError as e:
            raise self._broken(e) from None

    def _result(self, execution, output, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while execution >= self._read:
                self._check_open()
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._read_one(left)
            got = self._results.get(execution)
            if got is None or output not in got:
                raise ValueError(f"the result of execution {execution} was got already")
            value = got.pop(output)
            if not got:
                del self._results[execution]
            return value

    def _read_one(self, timeout):
        """Reads the outputs of execution self._read (a timeout keeps what came)."""
        execution = self._read
        ms = -1 if timeout is None else max(1, int(timeout * 1000))
        started = time.monotonic()
        for i, (slot, rank) in enumerate(self._plan.outputs):
            if i in self._partial:
                continue
            if self._first[i] != i:  # (one node given twice: one message)
                self._partial[i] = self._partial[self._first[i]]
                continue
            if ms >= 0:
                ms = max(1, int((timeout - (time.monotonic() - started)) * 1000))
            try:
                self._partial[i] = wire.loads(self._channel.recv_bytes(_plan.call_of(execution, slot), wire.WHAT, rank,
                                                                       ms, True))
            except GetTimeoutError:
                raise RayChannelTimeoutError(f"execution {execution} of the compiled graph gave no result within "
                                      f"{timeout} s (its output comes from {self._names[rank]})") from None
            except CollectiveError as e:
                raise self._broken(e) from None
        got, self._partial = self._partial, {}
        self._apply_releases()
        for i in self._dropped.pop(execution, ()):
            got.pop(i, None)
        if got:
            self._results[execution] = got
        self._read += 1

    def _release(self, execution, output):
        """A ref dropped unread (from any thread, the garbage collector's
        too: no lock here): its value is not kept."""
        self._released.append((execution, output))

    def _apply_releases(self):
        """REQUIRES self._lock."""
        while self._released:
            execution, output = self._released.popleft()
            if execution < self._read:
                got = self._results.get(execution)
                if got is not None:
                    got.pop(output, None)
                    if not got:
                        del self._results[execution]
            else:
                self._dropped.setdefault(execution, set()).add(output)

    def _broken(self, e):
        """A rank of the graph is gone: the graph is freed, the error names it."""
        self._closed = f"a process of the graph is gone ({e})"
        self._shut()
        return ActorDiedError(f"compiled graph: {e}. The graph is torn down; its other actors serve ordinary calls "
                              "again")

    # ---- teardown ----

    def teardown(self, timeout=30.0):
        """Ends every actor's loop after the executions in flight (their
        results stay readable), and frees the graph: the actors serve
        ordinary calls again. A second call does nothing."""
        with self._lock:
            if self._closed is not None:
                return
            try:
                execution = self._next
                body = wire.dumps(wire.STOP, "teardown")
                for slot, rank in self._plan.inputs:
                    self._send(_plan.call_of(execution, slot), body, rank)
                self._next += 1
                while self._read <= execution:
                    self._read_one(timeout)
                self._results.pop(execution, None)
                for rank in range(1, self._plan.world):
                    self._send(_plan.CLOSE_CALL, b"", rank, "close")
                api.get(self._loops, timeout=timeout)
            except ActorDiedError:
                pass  # (_broken has freed it)
            finally:
                self._closed = self._closed or "it was torn down (teardown())"
                self._shut()

    def _shut(self):
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        self._finalizer.detach()

    @staticmethod
    def _abandon(channel):
        """A compiled graph dropped without teardown: its channel closes, so
        every actor's loop ends (it sees the driver gone)."""
        if channel is not None:
            channel.close()

    def __repr__(self):
        return f"CompiledDAG({self._plan.world - 1} actors, {'closed' if self._closed else 'open'})"


class _AwaitableResult:
    """What execute_async gives: awaiting it gives the execution's value (a list for several outputs)."""

    def __init__(self, refs):
        self._refs = refs

    def __await__(self):
        import asyncio
        refs = self._refs
        get = (lambda: [r.get() for r in refs]) if isinstance(refs, list) else refs.get
        return asyncio.get_running_loop().run_in_executor(None, get).__await__()
