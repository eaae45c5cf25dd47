"""The worker side of a Pool: an actor that runs the pool's batches, and the record of an item that raised.

A batch is a list of (args, kwargs); run_batch returns one outcome per item, in order: the value, or a
Failure holding the exception and the worker's traceback text. Runs on the actor's one calling thread."""
import traceback

import phalanx


class RemoteTraceback(Exception):
    """The traceback an item's exception had in the pool's worker; it is that exception's __cause__ (as
    multiprocessing.pool shows it)."""

    def __str__(self):
        return self.args[0] if self.args else ""


class Failure:
    """An item that raised in the worker (error: its exception), or whose batch was lost (error: the
    phalanx error, for instance ActorDiedError after terminate())."""
    __slots__ = ("error", "remote_traceback")

    def __init__(self, error, remote_traceback=None):
        self.error = error
        self.remote_traceback = remote_traceback

    def __reduce__(self):
        return Failure, (self.error, self.remote_traceback)

    def exception(self):
        """The exception to raise or hand out, with the worker's traceback as its cause when there is one."""
        if self.remote_traceback and self.error.__cause__ is None:
            self.error.__cause__ = RemoteTraceback(self.remote_traceback)
        return self.error


class PoolActor:
    """One of a Pool's processes: runs the initializer once, then batches, one at a time."""

    def __init__(self, initializer=None, initargs=None):
        if initializer is not None:
            initializer(*(initargs or ()))

    def ping(self):
        """Returns once the constructor (and so the initializer) has run."""
        return None

    def run_batch(self, func, batch):
        outcomes = []
        for args, kwargs in batch:
            try:
                outcomes.append(func(*(args or ()), **(kwargs or {})))
            except Exception as e:  # noqa: BLE001 - each item's error goes back to the pool's caller
                outcomes.append(Failure(e, traceback.format_exc()))
        return outcomes


def pool_actor_class(remote_args):
    """PoolActor as an actor class with the pool's options (num_cpus=0 unless ray_remote_args says)."""
    return phalanx.remote(**{"num_cpus": 0, **(remote_args or {})})(PoolActor)
