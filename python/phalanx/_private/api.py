"""The driver API behind phalanx.init/shutdown/get/put/wait."""
import atexit
import json
import math
import os
import threading
import time

from phalanx import _core
from phalanx._private import driver_record as _driver_record
from phalanx._private import gpu_objects as _gpu_objects
from phalanx._private import runtime_env as _runtime_env
from phalanx._private import metrics_recorder
from phalanx._private import serialization as ser
from phalanx._private import state
from phalanx._private import stuck as _stuck
from phalanx._private import tensors as _tensors
from phalanx._private.cluster_records import current_head_address, use_cluster
from phalanx._private.init_options import InitOptions
from phalanx._private.log_stream import LogFollower
from phalanx._private.node import NodeProcesses, new_session_dir, restore_cluster_env, start_dashboard
from phalanx._private.rpc_tables import alive_nodes, all_nodes
from phalanx._private.task_options import check_amount
from phalanx.exceptions import GetTimeoutError, InvalidArgumentError, UnavailableError
from phalanx.generator import ObjectRefGenerator

_lock = threading.RLock()
_inline_limit = 100 * 1024


def inline_limit():
    return _inline_limit


def ensure_initialized():
    """As Ray does, the first call that needs a cluster starts the embedded
    one (phalanx.init() with defaults) unless PHALANX_AUTO_INIT=0."""
    if state.mode is None:
        if os.environ.get("PHALANX_AUTO_INIT", "1") == "0":
            raise UnavailableError("phalanx is not initialized: call phalanx.init() first "
                                   "(PHALANX_AUTO_INIT=0 turned off starting it on first use)")
        with _lock:
            if state.mode is None:
                init()


def _connect(socket_path):
    global _inline_limit
    state.info = _core.connect(socket_path, False, "", 15000)
    _inline_limit = state.info["inline_threshold"]


def _find_raylet(address):
    """The socket of a live raylet on this machine registered in the GCS at `address` (the oldest: the
    head, where several run here, as in cluster_utils.Cluster)."""
    deadline = time.monotonic() + 5.0  # (a raylet opens its socket before its record reaches the GCS)
    while True:
        nodes = sorted(alive_nodes(address), key=lambda n: n["start_time_ms"])
        local = [n for n in nodes if os.path.exists(n["socket_path"])]
        if local or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not local:
        raise UnavailableError(f"no live raylet of the cluster at {address} runs on this machine; "
                               "start one with `phalanx start --address HOST:PORT`")
    return local[0]["socket_path"]


def init(address=None, num_cpus=None, num_gpus=None, resources=None, object_store_memory=None,
         num_nodes=1, _system_config=None, *, namespace=None, ignore_reinit_error=False, logging_level=None,
         log_to_driver=True, include_dashboard=None, runtime_env=None, configure_logging=True, logging_format=None,
         **ray_options):
    """Connects this process to phalanx as a driver.

    With no address, starts an embedded local cluster (redis-server and one
    raylet) that stops at shutdown() or when this process exits. With
    address="HOST:PORT" (the GCS) or "auto" (PHALANX_ADDRESS), joins a running
    cluster through the raylet on this machine. num_gpus (default: what the
    CUDA driver reports) and resources ({"name": amount}) declare what the
    embedded node offers. num_nodes > 1 starts that many raylets on loopback
    (one GCS), each with num_cpus, the given resources and {"node:K": 1000}
    (K = 0 for the driver's node, 1, 2, ...), so actors and tasks can be
    placed on node K with resources={"node:K": 1}. Returns a dict with the
    node id, session folder and GCS address.

    Ray's keyword arguments: `namespace` (named actors are found within
    it; default: a namespace of this job's own, as in Ray),
    `ignore_reinit_error` (a second init() returns the first one's info),
    `logging_level` (of the "phalanx" logger), `log_to_driver` (default True: what the job's tasks and actors
    print to sys.stdout and sys.stderr, on any node, is printed here too,
    as `(f pid=123) line`; it always goes to the session's logs folder), `include_dashboard` (no dashboard yet: True is an
    error), `runtime_env` (the environment of this job's tasks and actors:
    working_dir, py_modules, env_vars; see phalanx/_private/runtime_env.py).
    Ray's other keywords (job_config, logging_config, dashboard_host/port with
    include_dashboard=True, _temp_dir, _node_ip_address, ...) are read by
    _private/init_options.py, which says what each does here."""
    if namespace is not None and not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, got {type(namespace).__name__} {namespace!r}")
    if namespace is not None and (not namespace or "/" in namespace):
        raise ValueError(f"namespace must be a non-empty string without '/', got {namespace!r}")
    extra = InitOptions(ray_options)
    namespace = extra.namespace(namespace)
    runtime_env = extra.runtime_env(runtime_env)
    _runtime_env.check(runtime_env, "phalanx.init()")
    if os.environ.get("PHALANX_JOB_ID") and state.mode is None:
        # The driver of a job (phalanx/job/agent.py): it joins the cluster that runs it, in the job's environment.
        if address is None:
            address = os.environ.get("PHALANX_ADDRESS")
        runtime_env = _runtime_env.merged(json.loads(os.environ.get("PHALANX_JOB_RUNTIME_ENV") or "{}"), runtime_env)
    if logging_level is not None:
        import logging
        logging.getLogger("phalanx").setLevel(logging_level)
    _stuck.read_threshold()
    with _lock:
        if state.mode is not None:
            if ignore_reinit_error:
                return InitContext(state.info)
            raise RuntimeError("phalanx.init() was already called; call phalanx.shutdown() first "
                               "(or pass ignore_reinit_error=True)")
        if address is None:  # (Ray's: RAY_ADDRESS, else the cluster last started on this machine, else a new one)
            address = _address_to_join()
        if address == "local":  # (Ray's: a new local cluster, whatever else runs here)
            address = None
        if address == "auto":
            address = os.environ.get("PHALANX_ADDRESS") or os.environ.get("RAY_ADDRESS") or current_head_address()
            if not address:
                raise UnavailableError("address='auto' but no cluster is known here: PHALANX_ADDRESS (or "
                                       "RAY_ADDRESS) is not set and `phalanx start --head` was not run; pass "
                                       "address='HOST:PORT'")
        if address is None:
            if num_cpus is not None:
                check_amount("num_cpus", num_cpus)
            if num_gpus is not None:
                check_amount("num_gpus", num_gpus)
            for k, v in (resources or {}).items():
                check_amount(f"resources[{k!r}]", v, k)
            if not isinstance(num_nodes, int) or num_nodes < 1:
                raise ValueError(f"num_nodes must be a positive int, got {num_nodes!r}")
            node = NodeProcesses(new_session_dir(extra.session_root()), token=extra.token())
            try:
                redis_addr = node.start_redis()
                raylet_args = extra.raylet_args()
                if num_gpus is not None:
                    raylet_args += ["--num-gpus", str(int(num_gpus))]
                for k, v in (_system_config or {}).items():
                    raylet_args += [f"--{k.replace('_', '-')}", str(v)]
                cpus = num_cpus if num_cpus is not None else os.cpu_count()
                socks = []
                for k in range(num_nodes):
                    res = dict(resources or {})
                    if num_nodes > 1:
                        res[f"node:{k}"] = 1000
                    args = raylet_args + (["--resources", json.dumps(res)] if res else [])
                    if k == 0 and extra.metrics_export_port() is not None:
                        args += ["--metrics-export-port", str(extra.metrics_export_port())]
                    socks.append(node.start_raylet(redis_addr, cpus, object_store_memory, extra_args=args))
                _connect(socks[0])
                if num_nodes > 1:
                    _wait_for_nodes(num_nodes, node.session_dir)
                dashboard = extra.dashboard(include_dashboard)
                if dashboard is not None:  # (it reads the cluster through a raylet: after them)
                    node.procs.append(("dashboard", start_dashboard(redis_addr, *dashboard, node.session_dir)))
            except BaseException:
                node.stop()
                raise
            state.node = node
        else:
            if any(v is not None for v in (num_cpus, num_gpus, resources, object_store_memory)):
                raise ValueError("num_cpus, num_gpus, resources and object_store_memory are set when a "
                                 "node starts; they cannot be given when joining a cluster")
            if _system_config:
                raise ValueError("When connecting to an existing cluster, _system_config must not be provided.")
            if extra.labels:
                raise ValueError("When connecting to an existing cluster, labels must not be provided: a node's "
                                 "labels are set when it starts (phalanx start --labels)")
            # PHALANX_CLUSTER_TOKEN and PHALANX_TLS, or what `phalanx start` kept here
            state.env_token_before = use_cluster(address)
            try:
                _connect(_find_raylet(address))
            except BaseException:
                _restore_token()
                raise
        state.mode = "driver"
        state.default_actor_lifetime = extra.default_actor_lifetime()
        state.job_metadata = extra.job_metadata()
        _start_job(namespace)
        _driver_record.started(state.namespace, runtime_env)  # (the state API's jobs)
        extra.configure_driver(logging_format)
        if log_to_driver:  # what the job's tasks and actors print, printed here (Ray's log_to_driver)
            state.log_follower = LogFollower(state.info["gcs_address"], state.job_id, state.info["node_id"])
        if runtime_env:
            try:
                _runtime_env.current = _runtime_env.resolve(runtime_env, b"")
            except BaseException:
                shutdown()  # (nothing half-made stays: the embedded cluster stops)
                raise
        _stuck.offer_driver_stacks(state.info["session_dir"])
        info = InitContext(state.info)
        mine = [n for n in gcs_nodes() if n["node_id"] == state.info["node_id"].hex()]
        info["metrics_export_port"] = mine[0]["metrics_export_port"] if mine else 0
        if state.node is not None and any(name == "dashboard" for name, _ in state.node.procs):
            host, port = extra.dashboard(include_dashboard)
            info["webui_url"] = f"{host}:{port}"
        return info


def _address_to_join():
    """Where init() with no address goes, as Ray's: PHALANX_ADDRESS or RAY_ADDRESS; else the cluster started
    last on this machine (`phalanx start --head`, or a live cluster_utils.Cluster of this process), if its GCS
    answers; else None (a new local cluster)."""
    found = os.environ.get("PHALANX_ADDRESS") or os.environ.get("RAY_ADDRESS")
    if found:
        return found
    recorded = _local_cluster_address or current_head_address()
    if recorded and _gcs_answers(recorded):
        return recorded
    if recorded:
        import warnings
        warnings.warn(f"the cluster recorded as started on this machine (GCS at {recorded}) does not answer: "
                      "starting a new local cluster (`phalanx stop` clears the record)", RuntimeWarning, stacklevel=3)
    return None


# A cluster_utils.Cluster of this process with a head node: init() with no address joins it (Ray's Cluster
# writes its head as the machine's current cluster; phalanx's keeps it to the process that made it).
_local_cluster_address = None


def _gcs_answers(address, timeout_s=1.0):
    import socket
    host, _, port = address.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


class InitContext(dict):
    """What init() returns: a dict of this driver's node id, session folder and GCS address (also under
    Ray's key "address"), which is also Ray's context object: `.address_info` (the same dict),
    `.dashboard_url`, and a context manager that shuts phalanx down at its end
    (`with phalanx.init(): ...`)."""

    def __init__(self, info):
        super().__init__(info)
        self.setdefault("address", info.get("gcs_address"))
        self.setdefault("webui_url", None)

    @property
    def address_info(self):
        return self

    @property
    def dashboard_url(self):
        return self["webui_url"]

    def disconnect(self):
        shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutdown()
        return False


def _start_job(namespace):
    """This driver's job id and namespace, inherited by every task it submits.
    (A job's own anonymous namespace travels as "": tasks name it from the job id.)"""
    state.job_id = os.urandom(4)
    state.namespace = namespace or anonymous_namespace(state.job_id)
    _core.set_job_context(state.job_id, namespace or "", False, b"")


def anonymous_namespace(job_id):
    return f"anonymous-{job_id.hex()}"


def current_namespace():
    """The namespace of the job this process (or this thread's task) works for."""
    task = state.current_task.get()
    if task is not None and task.job_id:
        return task.namespace or anonymous_namespace(task.job_id)
    return state.namespace


def gcs_nodes(alive_only=False):
    """The node table of this process's cluster (dicts, see rpc_tables)."""
    nodes = all_nodes(state.info["gcs_address"])
    return [n for n in nodes if n["alive"]] if alive_only else nodes


def _wait_for_nodes(n, session_dir, timeout=30.0):
    """Until `n` raylets are alive and each has read the others from the node table
    (its record's peers_alive, written at each heartbeat)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = gcs_nodes(alive_only=True)
        if len(alive) >= n and all(r["peers_alive"] >= n - 1 for r in alive):
            return
        if time.monotonic() > deadline:
            seen = ", ".join(str(r["peers_alive"]) for r in alive)
            raise UnavailableError(f"{len(alive)} of {n} raylets registered within {timeout} s, seeing "
                                   f"[{seen}] others each (logs in {session_dir}/logs)")
        time.sleep(0.05)


def shutdown():
    """Disconnects; stops the embedded cluster if init() started one. Safe to call twice."""
    with _lock:
        if state.mode is None:
            return
        try:
            _driver_record.finished()
            _stuck.withdraw_driver_stacks()
            if state.log_follower is not None:
                state.log_follower.stop()
                state.log_follower = None
            _gpu_objects.shutdown()  # (the GPU objects this process kept: their memory goes)
            _tensors.release_registration()  # (CUDA's hold on the store's pages, before they are unmapped)
            metrics_recorder.flush()
            _core.disconnect()
        finally:
            state.mode = None
            _runtime_env.current = b""
            if state.node is not None:
                state.node.stop()
                state.node = None
            _restore_token()


def _restore_token():
    before = getattr(state, "env_token_before", False)
    if before is False:
        return
    state.env_token_before = False
    restore_cluster_env(before)


atexit.register(shutdown)


def is_initialized():
    return state.mode is not None


class _RefsArgumentError(TypeError, ValueError):
    """Not a ref nor a list of them: a TypeError, and the ValueError Ray raises there."""


def _dag_refs(refs):
    """True for a compiled graph's CompiledDAGRef or a list of them."""
    first = refs[0] if isinstance(refs, (list, tuple)) and refs else refs
    return type(first).__name__ == "CompiledDAGRef" and type(first).__module__ == "phalanx.dag.compiled"


def _get_dag_refs(refs, timeout):
    """get() of a compiled graph's results (phalanx.dag): each ref reads its own."""
    if not isinstance(refs, (list, tuple)):
        return refs.get(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    return [r.get(None if deadline is None else max(0.0, deadline - time.monotonic())) for r in refs]


def _as_list(refs, fn):
    if isinstance(refs, _core.ObjectRef):
        if fn == "wait":
            raise TypeError("wait() takes a list of ObjectRefs, got a single ObjectRef: use wait([ref])")
        return [refs], True
    if not isinstance(refs, (list, tuple)):
        raise _RefsArgumentError(f"{fn} takes an ObjectRef or a list of them, got {type(refs).__name__}")
    for r in refs:
        if not isinstance(r, _core.ObjectRef):
            raise TypeError(f"{fn} takes ObjectRefs, got an element of type {type(r).__name__}")
    return list(refs), False


def _timeout_ms(timeout):
    if timeout is None or timeout == math.inf:
        return -1  # no limit
    if not timeout >= 0:  # (NaN too)
        raise ValueError(f"timeout must be a number >= 0, or None (or float('inf')) for none, got {timeout}")
    return int(min(timeout * 1000, 2**62))


def get(refs, timeout=None, device=None, copy=False, _probe=True, _asked=None):
    """The value of an ObjectRef (or a list of values for a list of refs).
    Blocks until ready; raises GetTimeoutError after `timeout` seconds, the
    task's TaskError if it raised, WorkerCrashedError if its worker died.
    A list ends at the first of its objects that fails, as Ray's get does,
    without waiting for the rest.
    numpy arrays in the store come back as read-only views, without a copy.
    `device` ("cpu", "cuda" or "cuda:N") puts every torch tensor in the
    values there (ValueError for a device this process does not have).
    A GPU object's tensors read on the GPU that holds them are that GPU's
    memory, shared with every reader there; `copy=True` gives private
    copies (docs/gpu.md)."""
    ensure_initialized()
    try:
        lst, single = _as_list(refs, "get")
    except TypeError:
        if not _dag_refs(refs):
            raise
        return _get_dag_refs(refs, timeout)
    device = _tensors.parse_device(device) if device is not None else None
    if not lst:
        return []
    ids = [r.binary() for r in lst]
    ms = _timeout_ms(timeout)
    # A long wait says once, in the log, what it waits for (docs/fault-tolerance.md):
    # the first wait ends at the report threshold, the rest goes on after the report.
    stuck_ms = _stuck.threshold_ms()
    probe = _probe and stuck_ms > 0 and (ms < 0 or ms > stuck_ms)
    values = _core.get(ids, stuck_ms if probe else ms)
    if len(values) > 1 and any(kind == 3 for kind, _ in values):
        for kind, payload in values:  # (ended at a failure, the rest not ready: that failure, as Ray's get)
            if ser.failed(kind, payload):
                ser.resolve(kind, payload)
    out = []
    for (kind, payload), ref in zip(values, lst):
        if kind == 3:
            if probe:
                waiting = [k == 3 for k, _ in values]
                _stuck.report("get", lst, waiting, stuck_ms / 1000)
                return get(refs, None if ms < 0 else (ms - stuck_ms) / 1000, device, copy, _probe=False,
                           _asked=timeout)
            missing = sum(1 for k, _ in values if k == 3)
            why = _why_not_ready(ref)
            raise GetTimeoutError(f"get timed out after {timeout if _asked is None else _asked} s: {missing} of "
                                  f"{len(lst)} objects "
                                  f"were not ready (the first is {ref!r}{'; ' + why if why else ''})")
        if device is None and not copy:
            out.append(ser.resolve(kind, payload))
        else:
            with _gpu_objects.reading(device, copy):  # (how a GPU object's tensors are read)
                out.append(ser.resolve(kind, payload))
    if device is not None:
        out = [_tensors.to_device(v, device) for v in out]
    return out[0] if single else out


def _why_not_ready(ref):
    """What a ref that timed out waits for, when phalanx knows (a placement group's ready ref)."""
    pg = state.pending_groups.get(ref.binary())
    if pg is None:
        return None
    try:
        why = pg.why_not_ready()
    except Exception:  # noqa: BLE001 - only an explanation
        why = ""
    return f"{pg.describe()} is not placed yet" + (f": {why}" if why else "")


def put(value):
    """Stores `value` and returns an ObjectRef to it. Large numpy arrays are
    copied once into shared memory."""
    return put_sized(value)[0]


def cancel(ref, *, force=False, recursive=True):
    """Cancels the task or actor call that makes `ref` (or an ObjectRefGenerator's):
    queued, it never runs; running, it gets KeyboardInterrupt (an async
    actor's call: asyncio cancellation; a sync actor's running call goes
    on, as in Ray); force=True kills the worker of a running task (for an
    actor's call it is refused, as in Ray: InvalidArgumentError, a
    ValueError). `get` then raises TaskCancelledError. A finished task is left
    alone. `recursive` is accepted for Ray's signature; the tasks a
    cancelled task submitted are not cancelled with it yet."""
    if isinstance(ref, ObjectRefGenerator):
        ref = ref.completed()
    if not isinstance(ref, _core.ObjectRef):
        # (an actor handle says what to do instead: actor.py's ActorHandle.CANCEL_REFUSAL)
        raise InvalidArgumentError(getattr(type(ref), "CANCEL_REFUSAL", None)
                                   or f"cancel() takes an ObjectRef, got {type(ref).__name__}")
    ensure_initialized()
    _core.cancel(ref.task_id(), bool(force), bool(recursive))


def _wait_with_generators(items, num_returns, timeout, fetch_local):
    """wait() over refs and ObjectRefGenerators (as in Ray): a generator is
    ready when next() would not block (an item is there, or it is over)."""
    if not 0 <= num_returns <= len(items):
        raise ValueError(f"num_returns must be between 0 and {len(items)}, got {num_returns}")
    refs = [r for r in items if not isinstance(r, ObjectRefGenerator)]
    _as_list(refs, "wait")
    if len({id(x) for x in items}) != len(items) or len({r.binary() for r in refs}) != len(refs):
        raise ValueError("wait() got the same ObjectRef or generator more than once")
    deadline = None if timeout is None or timeout == math.inf else time.monotonic() + max(_timeout_ms(timeout), 0) / 1000
    ids = [r.binary() for r in refs]
    stuck_ms = _stuck.threshold_ms()
    report_at = time.monotonic() + stuck_ms / 1000 if stuck_ms > 0 else None
    while True:
        ready_ids = set(_core.wait(ids, len(ids), 0, bool(fetch_local))) if ids else set()
        ready = [x for x in items if (x._ready_now() if isinstance(x, ObjectRefGenerator) else x.binary() in ready_ids)]
        if len(ready) >= num_returns or (deadline is not None and time.monotonic() >= deadline):
            ready = ready[:num_returns]
            chosen = {id(x) for x in ready}
            return ready, [x for x in items if id(x) not in chosen]
        if report_at is not None and time.monotonic() >= report_at:
            report_at = None
            chosen = {id(x) for x in ready}
            _stuck.report(f"wait (num_returns={num_returns})", items, [id(x) not in chosen for x in items],
                          stuck_ms / 1000, noun="refs and generators")
        # Block a moment on something not ready yet (refs first, else a generator), then look again.
        slice_ms = 10 if deadline is None else max(0, min(10, int((deadline - time.monotonic()) * 1000)))
        pending = [i for i in ids if i not in ready_ids]
        if pending:
            _core.wait(pending, 1, slice_ms, bool(fetch_local))
        else:
            next(x for x in items if isinstance(x, ObjectRefGenerator) and x not in ready)._ready_now(slice_ms)


def put_sized(value, in_store=False):
    """put(), and the size of the stored value. `in_store`: in the object
    store even when small (only store objects can be copied to other nodes)."""
    ensure_initialized()
    if isinstance(value, _core.ObjectRef):
        raise TypeError("put() of an ObjectRef is not allowed: pass the ref itself instead")
    oid = _core.next_put_id()
    try:
        meta, bufs, contained = ser.serialize(value, oid)
    except Exception as e:
        raise ser.SerializationError(f"put() of a {type(value).__name__} failed: it cannot be pickled: "
                                     f"{type(e).__name__}: {e}") from e
    try:
        size = _core.put_serialized(oid, ser.kind_of(value), meta, bufs, contained, True, in_store=in_store)
    except BaseException:
        _gpu_objects.drop(oid)  # (a GPU object that was never stored: its GPU copy goes)
        raise
    return _core.adopt_ref(oid), size


def wait(refs, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): the first `num_returns` refs that are ready, in the
    order given, and the rest. Returns early with fewer after `timeout` s.
    With fetch_local (the default, as in Ray) a ref is ready once its value
    is on this node, and values on other nodes are copied here; without it,
    once its value exists on any node, and nothing is copied (to wait for
    inputs of a collective without moving them)."""
    try:
        lst, _ = _as_list(list(refs) if isinstance(refs, (list, tuple)) else refs, "wait")
    except TypeError:  # (looked at only when an element is not a ref: plain waits pay nothing)
        if isinstance(refs, (list, tuple)) and any(isinstance(r, ObjectRefGenerator) for r in refs):
            return _wait_with_generators(list(refs), num_returns, timeout, fetch_local)
        raise
    if not lst:
        return [], []
    ensure_initialized()
    if len(set(r.binary() for r in lst)) != len(lst):
        raise ValueError("wait() got the same ObjectRef more than once")
    if not 0 <= num_returns <= len(lst):
        raise ValueError(f"num_returns must be between 0 and {len(lst)}, got {num_returns}")
    if num_returns == 0:
        return [], lst
    ids = [r.binary() for r in lst]
    ms = _timeout_ms(timeout)
    stuck_ms = _stuck.threshold_ms()
    if stuck_ms > 0 and (ms < 0 or ms > stuck_ms):  # a long wait says once what it waits for
        ready_ids = set(_core.wait(ids, num_returns, stuck_ms, bool(fetch_local)))
        if len(ready_ids) < num_returns:
            _stuck.report(f"wait (num_returns={num_returns})", lst, [i not in ready_ids for i in ids], stuck_ms / 1000)
            ready_ids = set(_core.wait(ids, num_returns, -1 if ms < 0 else ms - stuck_ms, bool(fetch_local)))
    else:
        ready_ids = set(_core.wait(ids, num_returns, ms, bool(fetch_local)))
    ready, not_ready = [], []
    for r in lst:
        (ready if r.binary() in ready_ids and len(ready) < num_returns else not_ready).append(r)
    return ready, not_ready


def cluster_stats(timeout=10.0):
    """Counters of the local raylet: store use, objects, tasks, workers."""
    ensure_initialized()
    return _core.stats(int(timeout * 1000))


def _resource_sums(key):
    ensure_initialized()
    out = {}
    for n in gcs_nodes(alive_only=True):
        for k, v in n[key].items():
            out[k] = out.get(k, 0.0) + v
    return out


def cluster_resources():
    """What the live nodes offer in all ({"CPU": 8.0, "GPU": 1.0, ...}), as Ray's."""
    return _resource_sums("resources_total")


def available_resources():
    """What is free now across the live nodes, as of each node's last heartbeat (as Ray's, without the
    resources of which nothing is free); object_store_memory is each store's capacity less what it holds."""
    ensure_initialized()
    out = {}
    for n in gcs_nodes(alive_only=True):
        free = dict(n["resources_available"])
        capacity = n["resources_total"].get("object_store_memory")
        if capacity is not None:
            free["object_store_memory"] = max(0.0, capacity - n["store_used"])
        for k, v in free.items():
            out[k] = out.get(k, 0.0) + v
    return {k: v for k, v in out.items() if v > 0}
