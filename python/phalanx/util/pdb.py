"""Ray's `ray.util.pdb`: the same module as ray.util.rpdb (phalanx refuses it: phalanx.util.rpdb.WHY)."""
from phalanx.util.rpdb import WHY, post_mortem, set_trace  # noqa: F401
