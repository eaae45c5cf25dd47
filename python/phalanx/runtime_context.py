"""phalanx.get_runtime_context(): what the calling process or task is, as
Ray's `ray.get_runtime_context()` reports it.

    ctx = phalanx.get_runtime_context()
    ctx.get_node_id(), ctx.get_job_id(), ctx.get_task_id(), ctx.get_actor_id()
    ctx.get_assigned_resources()     # {"CPU": 1.0, "GPU": 1.0, ...} of the running task or actor
    ctx.get_accelerator_ids()        # {"GPU": ["0"]}
    ctx.current_actor                # a handle to the actor this method runs in
    ctx.is_canceled()                # phalanx.cancel reached the running task or actor call
    ctx.namespace"""
import json
import os
import sys

from phalanx import _core
from phalanx._core import TaskCall
from phalanx._private import api, state, worker
from phalanx.actor import ActorHandle, _method_table


class HexId(str):
    """An id as a hex string that also answers Ray's id methods (`.hex()`, `.binary()`), so code written
    for Ray's `get_runtime_context().node_id.hex()` runs."""

    def hex(self):
        return str(self)

    def binary(self):
        return bytes.fromhex(self)


def _hex_id(value):
    return None if value is None else HexId(value)


class RuntimeContext:
    """A view of the caller's context; read it where you need it (inside a
    task it describes that task, inside an actor method that actor)."""

    def _task(self):
        return state.current_task.get()

    def get_node_id(self):
        """The id (hex) of the node this process runs on."""
        api.ensure_initialized()
        return state.info["node_id"].hex()

    def get_job_id(self):
        """The id (hex) of the job: the driver this work was submitted for."""
        api.ensure_initialized()
        t = self._task()
        return (t.job_id if t is not None and t.job_id else state.job_id).hex()

    def get_task_id(self):
        """The id (hex) of the running task or actor call; None in a driver."""
        t = self._task()
        return None if t is None else t.task_id.hex()

    def get_actor_id(self):
        """The id (hex) of the actor whose method or constructor runs here; None elsewhere."""
        t = self._task()
        return None if t is None or t.kind == TaskCall.TASK else t.actor_id.hex()

    def is_canceled(self):
        """Whether phalanx.cancel reached the running task or actor call. A
        sync or threaded actor's running call is not interrupted (as in
        Ray): it can check this and stop. RuntimeError in a driver or an
        async actor (whose calls are cancelled as asyncio tasks)."""
        t = self._task()
        if t is None or isinstance(worker._executor, worker._AsyncExecutor):
            raise RuntimeError("is_canceled() is only available inside a task or a sync or threaded actor's call "
                               "(an async actor's call is cancelled as an asyncio task)")
        if not _core.cancel_requested(t.task_id, True):
            return False
        worker._cancels_seen.add(t.task_id)  # (its value is then the cancel, as in Ray)
        return True

    @property
    def current_actor(self):
        """A handle to the actor this code runs in (RuntimeError elsewhere)."""
        t = self._task()
        if t is None or t.kind == TaskCall.TASK:
            raise RuntimeError("current_actor is only available inside an actor's method or constructor")
        instance = worker._actors.get(t.actor_id)
        cls = type(instance) if instance is not None else worker._load_function(t.function_id)
        class_name = worker._actor_class_names.get(t.actor_id) or (
            t.name if t.kind == TaskCall.ACTOR_CREATION else t.name.rpartition(".")[0])
        return ActorHandle(t.actor_id, t.function_id, class_name, _method_table(cls))

    def get_placement_group_id(self):
        """The id (hex) of the placement group the running task or actor was placed in; None if none."""
        pg = _core.current_placement_group() if _core.is_connected() else b""
        return pg.hex() if pg else None

    @property
    def was_current_actor_reconstructed(self):
        """True in an actor that was restarted (max_restarts), from its constructor on; False before."""
        t = self._task()
        if t is None or t.kind == TaskCall.TASK:
            raise RuntimeError("was_current_actor_reconstructed is only available inside an actor")
        creation = t if t.kind == TaskCall.ACTOR_CREATION else worker._actor_creations.get(t.actor_id, t)
        return creation.attempt > 0

    def get_assigned_resources(self):
        """What the running task or actor was given: {"CPU": n, "GPU": n, name: n}; {} in a driver."""
        t = self._task()
        if t is None:
            return {}
        if t.kind == TaskCall.ACTOR_METHOD:  # an actor's call: what the actor was given at its creation
            t = worker._actor_creations.get(t.actor_id, t)
        out = {"CPU": float(t.num_cpus)} if t.num_cpus else {}
        out.update(t.resources or {})
        return out

    def get_accelerator_ids(self):
        """{"GPU": [ids as strings]} this task or actor may use ([] in a driver)."""
        return {"GPU": [str(g) for g in state.gpu_ids]}

    @property
    def namespace(self):
        api.ensure_initialized()
        return api.current_namespace()

    def get(self):
        """The context as a dict, with Ray's keys: job_id, node_id, namespace; task_id inside a task or
        actor call, actor_id inside an actor."""
        out = {"job_id": self.get_job_id(), "node_id": self.get_node_id(), "namespace": self.namespace}
        task_id, actor_id = self.get_task_id(), self.get_actor_id()
        if task_id is not None:
            out["task_id"] = task_id
        if actor_id is not None:
            out["actor_id"] = actor_id
        return out

    def get_task_name(self):
        """The running task's or actor call's name (the function's or Class.method, or the name given with
        .options(name=...)); None in a driver."""
        t = self._task()
        if t is None:
            return None
        name = t.name
        try:  # the module the function or the actor's class came from: phalanx's names begin with it
            owner = worker._actors.get(t.actor_id) if t.kind != TaskCall.TASK else None
            if owner is not None:
                module = type(owner).__module__
            else:
                module = worker._load_function(t.function_id).__module__
        except Exception:
            module = None
        if module and name.startswith(module + "."):
            return name[len(module) + 1:]
        parts = name.split(".")
        for k in range(len(parts) - 1, 0, -1):  # else the longest leading name of a loaded module
            if ".".join(parts[:k]) in sys.modules:
                return ".".join(parts[k:])
        return name

    def get_task_function_name(self):
        """The running task's function (or Class.method), fully qualified: module.name; None in a driver."""
        t = self._task()
        return None if t is None else t.name

    def get_actor_name(self):
        """The name of the actor this runs in ("" if it has none); None outside an actor."""
        t = self._task()
        if t is None or t.kind == TaskCall.TASK:
            return None
        return worker._actor_names.get(t.actor_id, "")

    def get_worker_id(self):
        """The id (hex) of this process as the cluster knows it (its client id)."""
        api.ensure_initialized()
        return state.info["client_id"].hex()

    def get_session_name(self):
        """The name of this cluster's session (its folder's name)."""
        api.ensure_initialized()
        return os.path.basename(state.info["session_dir"].rstrip("/"))

    def get_node_labels(self):
        """This node's labels: those it was started with (init(labels=), `phalanx start --labels`) and
        Ray's default one, ray.io/node-id (its id in hex)."""
        node_id = self.get_node_id()
        for n in api.gcs_nodes():
            if n["node_id"] == node_id:
                return dict(n["labels"])
        return {"ray.io/node-id": node_id}

    def get_resource_ids(self):
        """The accelerators this task or actor may use, by resource ({"GPU": [ids]}; Ray's older name of
        get_accelerator_ids)."""
        return self.get_accelerator_ids()

    def get_runtime_env_string(self):
        """The runtime environment of this job or task as a JSON string."""
        return json.dumps(dict(self.runtime_env))

    @property
    def runtime_env(self):
        """The runtime environment this code runs in (a RuntimeEnv: a dict)."""
        from phalanx._private import runtime_env as _env
        from phalanx.runtime_env import RuntimeEnv
        return RuntimeEnv(**_env.describe(_env.current)) if _env.current else RuntimeEnv()

    @property
    def current_placement_group_id(self):
        return _hex_id(self.get_placement_group_id())

    @property
    def should_capture_child_tasks_in_placement_group(self):
        """Whether what this task or actor submits goes into its placement group by default."""
        return bool(_core.is_connected() and _core.captures_child_tasks())

    # Ray's properties beside the get_* methods.
    @property
    def node_id(self):
        return _hex_id(self.get_node_id())

    @property
    def job_id(self):
        return _hex_id(self.get_job_id())

    @property
    def task_id(self):
        return _hex_id(self.get_task_id())

    @property
    def actor_id(self):
        return _hex_id(self.get_actor_id())

    @property
    def gcs_address(self):
        api.ensure_initialized()
        return state.info["gcs_address"]


_context = RuntimeContext()


def get_runtime_context():
    return _context
