"""phalanx: remote functions and objects over a cluster of raylets.

    import phalanx
    phalanx.init()                       # an embedded local cluster

    @phalanx.remote
    def square(x):
        return x * x

    phalanx.get([square.remote(i) for i in range(10)])

`import phalanx as ray` runs Ray programs written for Ray's core API: the
names below are Ray's (docs/ray_compat.md lists what is covered).
"""
import socket as _socket

from phalanx._core import ObjectRef
from phalanx._private import api as _api
from phalanx._private import futures as _futures
from phalanx._private import state as _state
from phalanx._private import timeline as _timeline
from phalanx._private.api import (available_resources, cancel, cluster_resources, cluster_stats, get, init,
                                  is_initialized, put, shutdown, wait)
from phalanx import cloudpickle  # (Ray's ray.cloudpickle: the package phalanx pickles with)
from phalanx import collective, dag, exceptions, job_config, runtime_env, util
from phalanx.logging_config import LoggingConfig
from phalanx.actor import ActorClass, ActorHandle, checkpoint, get_actor, kill, method
from phalanx.exceptions import (ActorDiedError, CollectiveError, GetTimeoutError, InfeasibleError, NotFoundError,
                                ObjectLostError, ObjectStoreFullError, PhalanxError, SerializationError, TaskError,
                                TaskCancelledError, UnavailableError, WorkerCrashedError)
from phalanx.generator import DynamicObjectRefGenerator, ObjectRefGenerator
from phalanx.remote_function import NodeAffinitySchedulingStrategy, RemoteFunction
from phalanx.runtime_context import get_runtime_context

_futures.install()  # ObjectRef.future() and `await ref`

__version__ = "0.1.0"


def nodes():
    """The cluster's nodes from the GCS: id (hex), address, resources, alive, and the same under Ray's
    keys of ray.nodes() (NodeID, Alive, NodeManagerAddress, NodeManagerPort, Resources, ...)."""
    _api.ensure_initialized()
    out = []
    for n in _api.gcs_nodes():
        n = dict(n)
        n.update(NodeID=n["node_id"], Alive=n["alive"], NodeManagerAddress=n["address"],
                 NodeManagerHostname=_socket.gethostname() if n["address"] in ("127.0.0.1", "localhost")
                 else n["address"], NodeManagerPort=n["port"], NodeName=n.get("node_name") or n["address"],
                 RayletSocketName=n["socket_path"], Resources=dict(n["resources_total"]),
                 Labels=dict(n["labels"]), MetricsExportPort=n["metrics_export_port"])
        out.append(n)
    return out


def timeline(filename=None, since_s=600.0):
    """The cluster's timeline of the last `since_s` seconds as a Chrome trace
    (chrome://tracing, ui.perfetto.dev): tasks and actor calls on each
    worker, each task's time queued and running on its node, object copies
    between nodes and collective steps, with arrows from each object's task
    to its copies. Written to `filename` (JSON) when given, else returned as
    a list of events. docs/observability.md."""
    return _timeline.timeline(filename, since_s)


def get_node_id():
    """The id (hex) of the node this process runs on."""
    _api.ensure_initialized()
    return _state.info["node_id"].hex()


def get_gpu_ids():
    """The GPU ids this task or actor may use (what CUDA_VISIBLE_DEVICES lists); [] in a driver."""
    return list(_state.gpu_ids)


def get_neuron_core_ids():
    """The AWS Neuron cores this task or actor may use: none here (phalanx schedules CPUs and CUDA GPUs)."""
    return []


def remote(*args, **options):
    """Makes a function remote (a task) or a class remote (an actor):
    `@phalanx.remote`, `@phalanx.remote(num_cpus=1, num_returns=2, max_retries=3)`,
    `@phalanx.remote(num_cpus=1, max_restarts=2, max_task_retries=1)` on a class."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("use @phalanx.remote or @phalanx.remote(option=value, ...)")
    return lambda fn: _make_remote(fn, options)


def _make_remote(obj, options):
    if isinstance(obj, type):
        return ActorClass(obj, options)
    return RemoteFunction(obj, options)


from phalanx._private.ids import ActorID, JobID, NodeID, PlacementGroupID, TaskID  # noqa: E402  (Ray's ids)

__all__ = ["PlacementGroupID", "NodeID", "JobID", "ActorID", "TaskID", "init", "shutdown", "is_initialized", "remote", "get", "put", "wait", "cancel", "cluster_stats",
           "available_resources", "cluster_resources", "get_runtime_context", "exceptions", "util",
           "TaskCancelledError",
           "get_actor", "kill", "checkpoint", "method", "get_gpu_ids", "InfeasibleError", "nodes", "get_node_id",
           "NodeAffinitySchedulingStrategy", "ActorClass", "ActorHandle", "ActorDiedError", "NotFoundError",
           "ObjectRef", "ObjectRefGenerator", "DynamicObjectRefGenerator", "RemoteFunction", "PhalanxError", "TaskError", "GetTimeoutError",
           "WorkerCrashedError", "ObjectStoreFullError", "ObjectLostError", "UnavailableError",
           "SerializationError", "CollectiveError", "collective", "dag", "LoggingConfig", "get_neuron_core_ids",
           "job_config", "runtime_env"]
