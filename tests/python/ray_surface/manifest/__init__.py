"""Ray Core's public API, name by name (issue 55), read from Ray's documentation on 2026-12-07; one module
here per reference page (core.py, utility.py, ...), NAMES all of them.

Read (ray-project/ray, via the stored repository and docs.ray.io; the newest stored version of each):
  core            doc/source/ray-core/api/core.rst (+ docs.ray.io/en/latest ray.init, ray.remote, ray.method,
                  ActorClass.options, RemoteFunction.options, RuntimeContext, get_runtime_context, JobConfig pages;
                  python/ray/_common/ray_option_utils.py for the exact option names of tasks and actors;
                  python/ray/_private/worker.py init docstring for its documented `_` keywords);
                  doc/source/ray-core/api/cli.rst (Core CLI)
  utility         doc/source/ray-core/api/utility.rst (newest, with ray.util.tpu.*), docs.ray.io/en/latest
                  ray-core/api/utility.html, ActorPool and Queue pages, _modules/ray/util.html (ray.util's names),
                  ray-core/accelerator-types.html (ray.util.accelerators)
  exceptions      docs.ray.io/en/master/_sources/ray-core/api/exceptions.rst.txt (35 classes; the stored
                  doc/source/ray-core/api/exceptions.rst lists 26 of them)
  scheduling      doc/source/ray-core/api/scheduling.rst, docs.ray.io/en/latest ray-core/api/scheduling.html,
                  the PlacementGroup and placement_group pages, _modules/ray/util/scheduling_strategies.html,
                  python/ray/_common/ray_option_utils.py (NodeLabelSchedulingStrategy)
  runtime_env     doc/source/ray-core/api/runtime-env.rst, the RuntimeEnv / RuntimeEnvConfig pages
  state           doc/source/ray-observability/reference/api.rst and reference/cli.rst (older copies under
                  ray-observability/api/state/ name the same functions under ray.experimental.state)
  metrics         utility.rst "Custom Metrics"; doc/source/ray-observability/reference/system-metrics.md
  compiled_graph  doc/source/ray-core/compiled-graph/compiled-graph-api.rst, python/ray/dag/__init__.py,
                  python/ray/experimental/channel/__init__.py, the compiled-graph troubleshooting page
  collective      doc/source/ray-more-libs/ray-collective.rst (automodule ray.util.collective.collective),
                  python/ray/util/collective/__init__.py; doc/source/ray-core/api/direct-transport.rst (RDT)
  multiprocessing doc/source/ray-more-libs/multiprocessing.rst ("the full multiprocessing.Pool API"),
                  python/ray/util/multiprocessing/__init__.py
  job_submission  doc/source/cluster/running-applications/job-submission/jobs-package-ref.rst and cli.rst,
                  docs.ray.io/en/latest _sources/.../jobs-package-ref.rst.txt and JobSubmissionClient.rst.txt
  cluster_utils   python/ray/cluster_utils.py (DeveloperAPI; docs.ray.io/en/latest/_modules/ray/cluster_utils.html)

Status was read statically from phalanx's source (python/phalanx/__init__.py, actor.py, remote_function.py,
runtime_context.py, exceptions.py, generator.py, util/, dag/, job/, _private/api.py, _private/runtime_env.py,
scripts.py, job/cli.py) as of commit 753ae32 plus the working tree of that day.

Name schemes:
  "ray.a.b.C.m"          a module attribute, class, method or attribute, as a Ray user writes it. Resolve it
                         through the longest *proper* prefix that is a key of MODULE_ALIASES, then getattr the
                         rest (so "ray.util.placement_group" is the function, "ray.cloudpickle" an attribute of
                         ray). A few "has" entries are instance attributes or dataclass fields (the note says so).
  "F(kw=)"               keyword `kw` of callable F. "ray.remote(kw=)" is an option of @ray.remote on a function
                         and of RemoteFunction.options (phalanx: remote_function._OPTIONS, since both take
                         **options); "ray.actor.ActorClass.options(kw=)" is an option of @ray.remote on a class
                         and of ActorClass.options (phalanx: actor._ACTOR_OPTIONS).
  "cli:WORDS"            the command `ray WORDS` (phalanx's is `phalanx WORDS` where the note says "has").
  "runtime_env:FIELD"    a field of the runtime_env dict (ray.init, .options, jobs; phalanx/_private/runtime_env.py).
  "metric:NAME"          a Prometheus metric Ray exports (system-metrics page).
Status: "has" (phalanx has it; a note beginning "partial:" says what part is missing), "refuses" (cannot work
here by nature), "missing" (everything else)."""
from typing import Dict, List, Tuple

from . import (cluster_utils, collective, compiled_graph, core, exceptions, job_submission, metrics, multiprocessing,
               runtime_env, scheduling, state, utility)

# Each entry: (name, page, status, note)
#   name: the dotted name as a Ray user writes it ("ray.util.state.list_actors", "ray.init(labels=)", "cli:list actors",
#         "ray.actor.ActorMethod.options" for a method)
#   page: the reference page it is listed on ("core", "utility", "exceptions", "scheduling", "runtime_env", "state",
#         "metrics", "compiled_graph", "collective", "multiprocessing", "job_submission", "cluster_utils")
#   status: "has" | "refuses" | "missing"
#   note: for "refuses", why (e.g. "TPU slices: no TPU here"); else "" or a short remark
#   (one module per page, in the order below)
NAMES: List[Tuple[str, str, str, str]] = [
    *core.NAMES,
    *utility.NAMES,
    *exceptions.NAMES,
    *scheduling.NAMES,
    *runtime_env.NAMES,
    *state.NAMES,
    *metrics.NAMES,
    *compiled_graph.NAMES,
    *collective.NAMES,
    *multiprocessing.NAMES,
    *job_submission.NAMES,
    *cluster_utils.NAMES,
]

# Each Ray module a name above lives in, and the phalanx module that holds (or should hold) it. Where phalanx
# already keeps the names elsewhere (ray.dag.*'s submodules, ray.job_submission, ray.util.collective's
# submodules) the value is that module; elsewhere it mirrors Ray's path under phalanx.
MODULE_ALIASES: Dict[str, str] = {
    "ray": "phalanx",
    "ray.actor": "phalanx.actor",
    "ray.remote_function": "phalanx.remote_function",
    "ray.runtime_context": "phalanx.runtime_context",
    "ray.exceptions": "phalanx.exceptions",
    "ray.job_config": "phalanx.job_config",
    "ray.cross_language": "phalanx.cross_language",
    "ray.cloudpickle": "phalanx.cloudpickle",
    "ray.runtime_env": "phalanx.runtime_env",
    "ray.util": "phalanx.util",
    "ray.util.actor_pool": "phalanx.util.actor_pool",
    "ray.util.queue": "phalanx.util.queue",
    "ray.util.serialization": "phalanx.util.serialization",
    "ray.util.check_serialize": "phalanx.util.check_serialize",
    "ray.util.rpdb": "phalanx.util.rpdb",
    "ray.util.pdb": "phalanx.util.rpdb",
    "ray.util.tpu": "phalanx.util.tpu",
    "ray.util.accelerators": "phalanx.util.accelerators",
    "ray.util.metrics": "phalanx.util.metrics",
    "ray.util.placement_group": "phalanx.util.placement_group",
    "ray.util.scheduling_strategies": "phalanx.util.scheduling_strategies",
    "ray.util.state": "phalanx.util.state",
    "ray.util.state.common": "phalanx.util.state.common",
    "ray.util.state.exception": "phalanx.util.state.exception",
    "ray.util.collective": "phalanx.util.collective",
    "ray.util.collective.collective": "phalanx.util.collective",
    "ray.util.collective.types": "phalanx.util.collective",
    "ray.util.multiprocessing": "phalanx.util.multiprocessing",
    "ray.util.multiprocessing.pool": "phalanx.util.multiprocessing.pool",
    "ray.dag": "phalanx.dag",
    "ray.dag.input_node": "phalanx.dag",
    "ray.dag.output_node": "phalanx.dag",
    "ray.dag.compiled_dag_node": "phalanx.dag",
    "ray.dag.context": "phalanx.dag",
    "ray.experimental": "phalanx.experimental",
    "ray.experimental.compiled_dag_ref": "phalanx.dag",
    "ray.experimental.channel": "phalanx.experimental.channel",
    "ray.experimental.channel.torch_tensor_type": "phalanx.experimental.channel.torch_tensor_type",
    "ray.experimental.collective": "phalanx.experimental.collective",
    "ray.experimental.tqdm_ray": "phalanx.experimental.tqdm_ray",
    "ray.job_submission": "phalanx.job",
    "ray.cluster_utils": "phalanx.cluster_utils",
}
