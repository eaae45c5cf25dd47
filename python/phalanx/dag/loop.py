"""An actor's part of a compiled graph (plan.ActorProgram): one long call
(LOOP_METHOD, sent by compile) that joins the graph's channel group and
then, execution after execution, receives its inputs, runs its steps and
sends their results on, until STOP comes (teardown) or a rank of the graph
is gone. Ordinary calls of the actor wait meanwhile (of a threaded or async
actor: the loop holds one of its slots) and run again after teardown."""

import asyncio
import sys
import time
import traceback

from phalanx import _core
from phalanx._private import collective_group
from phalanx.dag import plan as _plan
from phalanx.dag import wire
from phalanx.exceptions import CollectiveError, TaskError

# The method name the loop call has (the worker runs `run` for it: worker._callable_for).
LOOP_METHOD = "__phalanx_dag_loop__"


def start(instance, is_async, group, rank, world, program, timeout):
    """The loop call's body. An async actor's loop runs on a thread of its
    own and its coroutine methods on the actor's event loop."""
    if is_async:
        event_loop = asyncio.get_event_loop()
        return event_loop.run_in_executor(None, run, instance, group, rank, world, program, timeout, event_loop)
    return run(instance, group, rank, world, program, timeout, None)


def run(instance, group, rank, world, program, timeout, event_loop):
    started = time.monotonic()
    channel = _core.open_group(group, rank, world)
    try:
        me = collective_group.arrival(rank, world, channel, program.name)
        collective_group.meet(group, world, me, channel, timeout, started)
        try:
            executions = _Loop(instance, channel, program, event_loop).serve()
        except CollectiveError:
            raise  # (a rank gone: the driver names it)
        except BaseException:  # the loop itself failed: the other ranks see this one gone; the log says why
            print(f"phalanx: the compiled graph loop of {program.name} failed:\n{traceback.format_exc()}",
                  file=sys.stderr, flush=True)
            raise
        # Every rank has passed STOP on: the driver says when all have, then each closes.
        channel.recv_bytes(_plan.CLOSE_CALL, "close", 0, 60000, False)
        return executions
    finally:
        channel.close()


class _Loop:
    def __init__(self, instance, channel, program, event_loop):
        self._instance = instance
        self._channel = channel
        self._program = program
        self._event_loop = event_loop
        self._methods = {s.node: getattr(instance, s.method) for s in program.steps}

    def serve(self):
        """Runs executions 1, 2, ... until STOP; returns how many ran."""
        execution = 1
        while True:
            if not self._one(execution):
                return execution - 1
            execution += 1

    def _recv(self, execution, slot, rank):
        return wire.loads(self._channel.recv_bytes(_plan.call_of(execution, slot), wire.WHAT, rank, -1, True))

    def _one(self, execution):
        """One execution; False once STOP came (passed on along every edge)."""
        prog = self._program
        args = kwargs = None
        stop = False
        if prog.input_slot is not None:
            given = self._recv(execution, prog.input_slot, 0)
            stop = given is wire.STOP
            if not stop:
                args, kwargs = given
        results, received = {}, {}
        for step in prog.steps:
            if stop:
                result = wire.STOP
            else:
                result = self._run(step, execution, args, kwargs, results, received)
                stop = result is wire.STOP
            results[step.node] = result
            if step.sends:
                body = wire.dumps(result, step.describe)
                for slot, rank in step.sends:
                    self._channel.send_bytes(_plan.call_of(execution, slot), wire.WHAT, body, rank, -1)
        return not stop

    def _run(self, step, execution, args, kwargs, results, received):
        try:
            pos = [self._value(a, execution, args, kwargs, results, received) for a in step.args]
            kw = {k: self._value(a, execution, args, kwargs, results, received) for k, a in step.kwargs.items()}
        except CollectiveError:
            raise  # a rank gone: the loop ends (its error is not a value: the driver names the actor that died)
        except Exception as e:  # noqa: BLE001 - a missing input part: the error goes on as a value
            return wire.Raised(TaskError.make(step.describe, traceback.format_exc(), e))
        for v in (*pos, *kw.values()):
            if v is wire.STOP or isinstance(v, wire.Raised):
                return v  # (an upstream error skips this step and goes on to the output)
        try:
            result = self._methods[step.node](*pos, **kw)
            if self._event_loop is not None and asyncio.iscoroutine(result):
                result = asyncio.run_coroutine_threadsafe(result, self._event_loop).result()
            return result
        except Exception as e:  # noqa: BLE001 - raised by the method: to the driver's get()
            return wire.Raised(TaskError.make(step.describe, traceback.format_exc(), e))

    def _value(self, arg, execution, args, kwargs, results, received):
        kind = arg[0]
        if kind == "const":
            return arg[1]
        if kind == "local":
            return results[arg[1]]
        if kind == "recv":
            slot = arg[1]
            if slot not in received:
                received[slot] = self._recv(execution, slot, arg[2])
            return received[slot]
        return _plan.input_value(args, kwargs) if kind == "input" else _plan.input_part(arg[1], args, kwargs)
