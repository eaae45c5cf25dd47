"""`import ray` resolved to phalanx, for Ray's tests run as Ray users write them.

Only the suite's conftest puts this folder on the path (and on the workers' PYTHONPATH), and only when
RAY_SUITE_TARGET is phalanx. Each `ray.X` submodule a test imports is phalanx's module of that name,
registered once, so `ray.exceptions.RayTaskError is phalanx.exceptions.RayTaskError`."""
import importlib
import sys

import phalanx

_SUBMODULES = {
    "ray.exceptions": "phalanx.exceptions",
    "ray.actor": "phalanx.actor",
    "ray.remote_function": "phalanx.remote_function",
    "ray.runtime_context": "phalanx.runtime_context",
    "ray.util": "phalanx.util",
    "ray.util.queue": "phalanx.util.queue",
    "ray.util.actor_pool": "phalanx.util.actor_pool",
    "ray.util.placement_group": "phalanx.util.placement_group",
    "ray.util.scheduling_strategies": "phalanx.util.scheduling_strategies",
    "ray.util.collective": "phalanx.util.collective",
    "ray.util.collective.types": "phalanx.util.collective",
    "ray.util.multiprocessing": "phalanx.util.multiprocessing",
    "ray.util.serialization": "phalanx.util.serialization",
    "ray.util.check_serialize": "phalanx.util.check_serialize",
    "ray.util.accelerators": "phalanx.util.accelerators",
    "ray.util.metrics": "phalanx.util.metrics",
    "ray.util.state": "phalanx.util.state",
    "ray.util.state.api": "phalanx.util.state.api",
    "ray.util.state.common": "phalanx.util.state.common",
    "ray.util.state.exception": "phalanx.util.state.exception",
    "ray.cloudpickle": "phalanx.cloudpickle",
    "ray.cluster_utils": "phalanx.cluster_utils",
    "ray.job_config": "phalanx.job_config",
    "ray.job_submission": "phalanx.job",
    "ray.runtime_env": "phalanx.runtime_env",
    "ray.dag": "phalanx.dag",
    "ray.dag.input_node": "phalanx.dag.input_node",
    "ray.dag.output_node": "phalanx.dag.output_node",
    "ray.dag.function_node": "phalanx.dag.function_node",
    "ray.dag.class_node": "phalanx.dag.class_node",
    "ray.dag.dag_node": "phalanx.dag.dag_node",
    "ray.dag.compiled_dag_node": "phalanx.dag.compiled_dag_node",
    "ray.dag.context": "phalanx.dag.context",
}

for _alias, _name in _SUBMODULES.items():
    sys.modules[_alias] = importlib.import_module(_name)

sys.modules[__name__] = phalanx  # `import ray` is `import phalanx`, attribute for attribute
