"""Call graphs of actor methods, Ray's DAG API (docs/compiled-graphs.md).

    from phalanx.dag import InputNode, MultiOutputNode
    with InputNode() as inp:
        dag = learner.update.bind(inference.act.bind(inp))
    compiled = dag.experimental_compile()
    ref = compiled.execute(observation)
    phalanx.get(ref)
    compiled.teardown()
"""

from phalanx.dag.compiled import CompiledDAG, CompiledDAGRef, CompiledGraphClosedError
from phalanx.dag.context import DAGContext
from phalanx.dag.nodes import (ClassMethodNode, ClassNode, ClassNodeMethodNode, DAGInputData, DAGNode, FunctionNode,
                               InputAttributeNode, InputNode, MultiOutputNode)

__all__ = ["InputNode", "MultiOutputNode", "DAGNode", "ClassMethodNode", "ClassNode", "ClassNodeMethodNode",
           "FunctionNode", "InputAttributeNode", "DAGInputData", "DAGContext", "CompiledDAG", "CompiledDAGRef",
           "CompiledGraphClosedError"]
