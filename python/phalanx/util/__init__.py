"""Ray's `ray.util` helpers under the names Ray users look for:
`ActorPool` (here), `queue.Queue`, `collective` (static groups), placement
groups (`placement_group`, `remove_placement_group`, ...) and
`scheduling_strategies`."""
from phalanx.util.actor_pool import ActorPool
from phalanx.util.placement_group import (PlacementGroup, get_placement_group, placement_group,
                                          placement_group_table, remove_placement_group)

__all__ = ["ActorPool", "PlacementGroup", "get_placement_group", "placement_group", "placement_group_table",
           "remove_placement_group"]
