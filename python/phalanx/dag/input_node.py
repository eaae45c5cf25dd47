"""Ray's module path `ray.dag.input_node` (the names live in phalanx.dag.nodes)."""
from phalanx.dag.nodes import DAGInputData, InputAttributeNode, InputNode  # noqa: F401
