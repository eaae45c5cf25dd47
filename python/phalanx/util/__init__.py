"""Ray's `ray.util` helpers under the names Ray users look for:
`ActorPool` (here), `queue.Queue`, and `collective` (static groups)."""
from phalanx.util.actor_pool import ActorPool

__all__ = ["ActorPool"]
