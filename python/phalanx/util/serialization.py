"""Ray's custom serializers (`ray.util.register_serializer`): how values of a class that pickle cannot
handle (or should not: a lock, a connection, a handle to something local) are stored.

    phalanx.util.register_serializer(A, serializer=lambda a: a.x, deserializer=lambda x: A(x))

As in Ray, a registration holds in the process that made it (register in a task or an actor's
constructor to have it there too); the deserializer is stored with each value, so whoever reads the
value needs no registration. Registering a class again replaces its serializer; deregistering one that
is not registered does nothing (both as Ray)."""
from phalanx._private import serialization as _ser


def _rebuild(deserializer, state):
    return deserializer(state)


def register_serializer(cls, *, serializer, deserializer):
    """Stores values of exactly `cls` as `serializer(value)`, read back with `deserializer(...)`."""
    if not isinstance(cls, type):
        raise TypeError(f"register_serializer() takes a class, got {cls!r}")
    if not callable(serializer) or not callable(deserializer):
        raise TypeError("register_serializer(): serializer and deserializer must be callables, got "
                        f"{type(serializer).__name__} and {type(deserializer).__name__}")

    def reduce(obj):
        return _rebuild, (deserializer, serializer(obj))

    _ser.custom_reducers[cls] = reduce


def deregister_serializer(cls):
    """Forgets the serializer of `cls` in this process (nothing happens if there is none)."""
    _ser.custom_reducers.pop(cls, None)


__all__ = ["register_serializer", "deregister_serializer"]
