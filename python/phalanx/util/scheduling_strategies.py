"""Scheduling strategies under Ray's module name (`ray.util.scheduling_strategies`)."""
from phalanx._private.label_strategy import DoesNotExist, Exists, In, NodeLabelSchedulingStrategy, NotIn
from phalanx.remote_function import NodeAffinitySchedulingStrategy
from phalanx.util.placement_group import PlacementGroupSchedulingStrategy

__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy", "NodeLabelSchedulingStrategy", "In",
           "NotIn", "Exists", "DoesNotExist"]
