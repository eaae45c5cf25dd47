"""Ray's module path `ray.dag.class_node`."""
from phalanx.dag.nodes import ClassMethodNode, ClassNode  # noqa: F401
