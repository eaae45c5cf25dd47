"""What travels on a compiled graph's edges: a pickled value, an error
raised upstream (as a value: the executions after it go on), or STOP (the
graph's teardown, passed along every edge so each actor ends its loop after
the last execution).

A message is the value pickled with protocol 5, its buffers (numpy arrays'
memory, bytearrays) out of band: sent from where they lie and unpickled
where they arrive, not copied in either process. Without buffers it is the
pickle alone (which starts with byte 0x80); with some: b"B", u32 how many,
u64 the pickle's length and each buffer's, the pickle, then each buffer on
a 64-byte boundary of the message (the receiver's bytes start on a 16-byte
one: Received in python/bindings/groups.cc)."""

import pickle
import struct

import cloudpickle

from phalanx.exceptions import SerializationError, TaskError


class _Stop:
    def __reduce__(self):
        return (_stop, ())


def _stop():
    return STOP


STOP = _Stop()


class Raised:
    """An exception a step raised (a TaskError naming the method), carried to
    the steps after it and raised by the driver's get()."""
    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error

    def __reduce__(self):
        return (Raised, (self.error,))


WHAT = "compiled-dag"  # a message's kind; 12 characters: its bytes start 16 after its frame's
_ALIGN = 64
_ZEROS = bytes(_ALIGN)
_HEAD = struct.Struct("<cIQ")  # b"B", how many buffers, the pickle's length


def _message(value, pickler):
    buffers = []
    meta = pickler(value, protocol=5, buffer_callback=buffers.append)
    if not buffers:
        return meta
    raws = [b.raw() for b in buffers]
    head = _HEAD.pack(b"B", len(raws), len(meta)) + struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
    parts, at = [head, meta], len(head) + len(meta)
    for r in raws:
        pad = -at % _ALIGN
        if pad:
            parts.append(_ZEROS[:pad])
        parts.append(r)
        at += pad + r.nbytes
    return parts


def dumps_or_raise(value, what):
    """`value` as a message (bytes, or a list of buffers sent one after the other);
    SerializationError naming `what` if it cannot be pickled."""
    try:
        return _message(value, pickle.dumps)
    except Exception:  # noqa: BLE001 - lambdas, local classes: cloudpickle takes them
        try:
            return _message(value, cloudpickle.dumps)
        except Exception as e:  # noqa: BLE001
            raise SerializationError(f"{what} cannot be pickled: {type(e).__name__}: {e}") from None


def dumps(value, what):
    """`value` as a message; a Raised naming `what` if it cannot be pickled (it goes on as the value)."""
    try:
        return dumps_or_raise(value, f"the value of {what}")
    except SerializationError as error:
        return _message(Raised(TaskError.make(what, f"{type(error).__name__}: {error}\n", error)), pickle.dumps)


def loads(received):
    """The value of a message as it arrived (a bytearray, or a Received: its
    buffers become the unpickled arrays' memory, writable)."""
    view = received if type(received) is bytearray else memoryview(received)
    if view[0] == 0x80:
        return pickle.loads(view)
    _, count, meta_len = _HEAD.unpack_from(view)
    sizes = struct.unpack_from(f"<{count}Q", view, _HEAD.size)
    at = _HEAD.size + 8 * count
    meta = view[at:at + meta_len]
    at += meta_len
    buffers = []
    for n in sizes:
        at += -at % _ALIGN
        buffers.append(view[at:at + n])
        at += n
    return pickle.loads(meta, buffers=buffers)
