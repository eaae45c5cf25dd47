"""Scheduling strategies under Ray's module name (`ray.util.scheduling_strategies`)."""
from phalanx.remote_function import NodeAffinitySchedulingStrategy
from phalanx.util.placement_group import PlacementGroupSchedulingStrategy

__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy"]
