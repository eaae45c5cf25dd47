"""Ray's id classes (ray.NodeID, ray.JobID, ray.ActorID, ray.TaskID, ray.PlacementGroupID): bytes that also
answer Ray's id methods (hex, binary, from_hex, from_random, nil, is_nil). phalanx's ids are 16 bytes (a job's:
its driver's, as the runtime context gives it)."""
import os


class BaseID(bytes):
    SIZE = 16

    def binary(self):
        return bytes(self)

    def is_nil(self):
        return not self or self == b"\xff" * len(self)

    @classmethod
    def from_random(cls):
        return cls(os.urandom(cls.SIZE))

    @classmethod
    def from_binary(cls, data):
        return cls(data)

    @classmethod
    def from_hex(cls, text):
        return cls(bytes.fromhex(text))

    @classmethod
    def nil(cls):
        return cls(b"\xff" * cls.SIZE)

    @classmethod
    def size(cls):
        return cls.SIZE

    def __repr__(self):
        return f"{type(self).__name__}({self.hex()})"


class NodeID(BaseID):
    """A node's id (ray.NodeID): `.hex()` is what ray.nodes()' NodeID and get_node_id() give."""


class JobID(BaseID):
    """A job's id (ray.JobID)."""


class ActorID(BaseID):
    """An actor's id (ray.ActorID)."""


class TaskID(BaseID):
    """A task's id (ray.TaskID)."""


class PlacementGroupID(BaseID):
    """A placement group's id (ray.PlacementGroupID)."""
