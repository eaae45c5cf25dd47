"""Ray's module path `ray.dag.output_node`."""
from phalanx.dag.nodes import MultiOutputNode  # noqa: F401
