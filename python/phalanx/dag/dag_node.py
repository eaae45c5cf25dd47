"""Ray's module path `ray.dag.dag_node`."""
from phalanx.dag.nodes import DAGNode  # noqa: F401
