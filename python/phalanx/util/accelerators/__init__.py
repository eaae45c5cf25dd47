"""Ray's accelerator type names (`ray.util.accelerators`), the values of `accelerator_type=` in options.
A node offers `accelerator_type:<NAME>` when started with it (phalanx start --resources), and a task
asking for an accelerator type is placed on such a node (docs/ray_compat.md)."""
from phalanx.util.accelerators.accelerators import *  # noqa: F401,F403
from phalanx.util.accelerators.accelerators import __all__  # noqa: F401
