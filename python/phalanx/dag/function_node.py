"""Ray's module path `ray.dag.function_node`."""
from phalanx.dag.nodes import FunctionNode  # noqa: F401
