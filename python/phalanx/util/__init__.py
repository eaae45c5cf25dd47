"""Ray's `ray.util` helpers under the names Ray users look for: `ActorPool`, `queue.Queue`,
`collective` (static groups), placement groups (`placement_group`, `remove_placement_group`, ...),
`scheduling_strategies`, custom serializers (`register_serializer`, `deregister_serializer`,
`inspect_serializability`), `as_completed` and `map_unordered`, `list_named_actors`,
`get_node_ip_address`, and the accelerator type names (`accelerators`)."""
from phalanx.util import accelerators
from phalanx.util.actor_pool import ActorPool
from phalanx.util.check_serialize import inspect_serializability
from phalanx.util.helpers import as_completed, map_unordered
from phalanx.util.names import get_node_instance_id, get_node_ip_address, list_named_actors
from phalanx.util.placement_group import (PlacementGroup, get_current_placement_group, get_placement_group,
                                          placement_group, placement_group_table, remove_placement_group)
from phalanx.util.serialization import deregister_serializer, register_serializer

__all__ = ["ActorPool", "PlacementGroup", "accelerators", "as_completed", "deregister_serializer",
           "get_current_placement_group", "get_node_instance_id", "get_node_ip_address", "get_placement_group", "inspect_serializability",
           "list_named_actors", "map_unordered", "placement_group", "placement_group_table", "register_serializer",
           "remove_placement_group"]
