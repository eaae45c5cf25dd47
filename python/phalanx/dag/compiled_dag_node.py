"""Ray's module path `ray.dag.compiled_dag_node`."""
from phalanx.dag.compiled import CompiledDAG  # noqa: F401
