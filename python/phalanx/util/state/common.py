"""The state API's schema, under Ray's names (ray.util.state.common): the options of a call, one
dataclass per resource (ActorState, TaskState, ...), and the summaries. Each resource's columns are
Ray's, in Ray's order, with Ray's `filterable` and `detail` marks: a list without detail=True leaves
the detail columns None. A state reads as attributes and as a dict (`a.state`, `a["state"]`, `a.get()`,
`a.keys()`, `dict(a)`). What each column holds here, and which are not known here: the module
docstrings of cluster_rows.py, activity_rows.py and object_rows.py, and docs/observability.md."""
import dataclasses
import datetime
import enum
import os
from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional, Tuple, Union

DEFAULT_RPC_TIMEOUT = 30
DEFAULT_LIMIT = 100
DEFAULT_LOG_LIMIT = 1000
# The most entries one call returns (a larger limit is refused) and the most read from a source.
RAY_MAX_LIMIT_FROM_API_SERVER = int(os.environ.get("RAY_MAX_LIMIT_FROM_API_SERVER", 10000))
RAY_MAX_LIMIT_FROM_DATA_SOURCE = int(os.environ.get("RAY_MAX_LIMIT_FROM_DATA_SOURCE", 10000))

SupportedFilterType = Union[str, bool, int, float]
PredicateType = str  # "=" or "!="
PREDICATES = ("=", "!=")


@enum.unique
class StateResource(enum.Enum):
    ACTORS = "actors"
    JOBS = "jobs"
    PLACEMENT_GROUPS = "placement_groups"
    NODES = "nodes"
    WORKERS = "workers"
    TASKS = "tasks"
    OBJECTS = "objects"
    RUNTIME_ENVS = "runtime_envs"


@enum.unique
class SummaryResource(enum.Enum):
    ACTORS = "actors"
    TASKS = "tasks"
    OBJECTS = "objects"


class Humanify:
    """Ray's converters of a column's value for printing."""

    @staticmethod
    def timestamp(x):
        return str(datetime.datetime.fromtimestamp(x / 1000))

    @staticmethod
    def memory(x):
        for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if x >= scale:
                return f"{x / scale:.3f} {unit}"
        return f"{x:.3f} B"

    @staticmethod
    def node_resources(resources):
        return {k: Humanify.memory(v) if "memory" in k else v for k, v in resources.items()}


def _scaled_timeout(timeout, multiplier):
    scaled = timeout * multiplier
    if not scaled > 0:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    return scaled


def check_filters(filters):
    """The filters as a list of (key, predicate, value), checked as Ray's ListApiOptions checks them."""
    out = []
    for f in filters or []:
        if not isinstance(f, (tuple, list)) or len(f) != 3:
            raise ValueError(f"The given filter has incorrect input type, {f}. Provide (key, predicate, value) "
                             "tuples.")
        if f[1] not in PREDICATES:
            raise ValueError(f"Unsupported filter predicate {f[1]} is given. Available predicates: =, !=.")
        out.append(tuple(f))
    return out


@dataclass
class ListApiOptions:
    limit: int = DEFAULT_LIMIT
    timeout: float = DEFAULT_RPC_TIMEOUT
    detail: bool = False
    filters: Optional[List[Tuple[str, PredicateType, SupportedFilterType]]] = field(default_factory=list)
    exclude_driver: bool = True
    server_timeout_multiplier: float = 0.8

    def __post_init__(self):
        self.timeout = _scaled_timeout(self.timeout, self.server_timeout_multiplier)
        self.filters = check_filters(self.filters)

    def has_conflicting_filters(self):
        """True when two "=" filters of one key want different values (nothing can match)."""
        wanted = {}
        for key, predicate, value in self.filters:
            if predicate == "=":
                if key in wanted and wanted[key] != value:
                    return True
                wanted[key] = value
        return False


@dataclass
class GetApiOptions:
    timeout: float = DEFAULT_RPC_TIMEOUT
    server_timeout_multiplier: float = 0.8

    def __post_init__(self):
        self.timeout = _scaled_timeout(self.timeout, self.server_timeout_multiplier)


@dataclass
class SummaryApiOptions:
    timeout: float = DEFAULT_RPC_TIMEOUT
    filters: Optional[List[Tuple[str, PredicateType, SupportedFilterType]]] = field(default_factory=list)
    summary_by: Optional[str] = None

    def __post_init__(self):
        self.filters = check_filters(self.filters)


def state_column(*, filterable, detail=False, format_fn=None, **kwargs):
    """A dataclass field with Ray's marks: filterable (a filter may name it), detail (only with detail=True)."""
    if detail and "default" not in kwargs:
        kwargs["default"] = None
    kwargs.setdefault("metadata", {})
    kwargs["metadata"] = dict(kwargs["metadata"], detail=detail, filterable=filterable, format_fn=format_fn)
    return field(**kwargs)


class StateSchema:
    """A resource's state: a dataclass whose fields are its columns."""

    @classmethod
    def list_columns(cls, detail=True):
        return [f.name for f in fields(cls) if detail or not f.metadata.get("detail", False)]

    @classmethod
    def columns(cls):
        return set(cls.list_columns(detail=True))

    @classmethod
    def filterable_columns(cls):
        return {f.name for f in fields(cls) if f.metadata.get("filterable", False)}

    @classmethod
    def base_columns(cls):
        return set(cls.list_columns(detail=False))

    @classmethod
    def detail_columns(cls):
        return set(cls.list_columns(detail=True))

    @classmethod
    def humanify(cls, state):
        """`state` (a dict) with each column that has a format_fn made readable."""
        for f in fields(cls):
            fn = f.metadata.get("format_fn")
            if fn is not None and state.get(f.name) is not None:
                state[f.name] = fn(state[f.name])
        return state

    def asdict(self):
        return dataclasses.asdict(self)

    def __getitem__(self, key):
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def __setitem__(self, key, value):
        setattr(self, key, value)

    def get(self, key, default=None):
        return getattr(self, key, default)

    def keys(self):
        """The columns this state was listed with (the detail ones too when it was)."""
        return self.list_columns(detail=getattr(self, "_detail", True))

    def __contains__(self, key):
        return key in self.keys()


def filter_fields(data, schema, detail):
    """`data` (a dict) with exactly the schema's columns (its base ones without `detail`), None where missing."""
    return {col: data.get(col) for col in schema.list_columns(detail=detail)}


def _timestamp_or_blank(x):
    return "" if x == -1 else Humanify.timestamp(x)


@dataclass
class ActorState(StateSchema):
    actor_id: str = state_column(filterable=True)
    class_name: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    name: Optional[str] = state_column(filterable=True)
    node_id: Optional[str] = state_column(filterable=True)
    pid: Optional[int] = state_column(filterable=True)
    ray_namespace: Optional[str] = state_column(filterable=True)
    serialized_runtime_env: Optional[str] = state_column(filterable=False, detail=True)
    required_resources: Optional[dict] = state_column(filterable=False, detail=True)
    death_cause: Optional[dict] = state_column(filterable=False, detail=True)
    is_detached: Optional[bool] = state_column(filterable=False, detail=True)
    placement_group_id: Optional[str] = state_column(detail=True, filterable=True)
    repr_name: Optional[str] = state_column(detail=True, filterable=True)
    num_restarts: int = state_column(filterable=False, detail=True)
    num_restarts_due_to_lineage_reconstruction: int = state_column(filterable=False, detail=True)


@dataclass
class PlacementGroupState(StateSchema):
    placement_group_id: str = state_column(filterable=True)
    name: str = state_column(filterable=True)
    creator_job_id: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    bundles: Optional[List[dict]] = state_column(filterable=False, detail=True)
    is_detached: Optional[bool] = state_column(filterable=True, detail=True)
    stats: Optional[dict] = state_column(filterable=False, detail=True)


@dataclass
class NodeState(StateSchema):
    node_id: str = state_column(filterable=True)
    node_ip: str = state_column(filterable=True)
    is_head_node: bool = state_column(filterable=True)
    state: str = state_column(filterable=True)
    state_message: Optional[str] = state_column(filterable=False)
    node_name: str = state_column(filterable=True)
    resources_total: dict = state_column(filterable=False, format_fn=Humanify.node_resources)
    labels: dict = state_column(filterable=False)
    start_time_ms: Optional[int] = state_column(filterable=False, detail=True, format_fn=Humanify.timestamp)
    end_time_ms: Optional[int] = state_column(filterable=False, detail=True, format_fn=Humanify.timestamp)


@dataclass
class JobState(StateSchema):
    """A job: submitted (`phalanx job submit`, JobSubmissionClient) or a driver's (phalanx.init).
    Ray's JobDetails columns; filterable by job_id, type, status and submission_id, as Ray's."""
    job_id: Optional[str] = state_column(filterable=True)
    submission_id: Optional[str] = state_column(filterable=True)
    entrypoint: Optional[str] = state_column(filterable=False)
    type: str = state_column(filterable=True)
    status: str = state_column(filterable=True)
    message: Optional[str] = state_column(filterable=False)
    error_type: Optional[str] = state_column(filterable=False)
    driver_info: Optional[dict] = state_column(filterable=False)
    start_time: Optional[int] = state_column(filterable=False, detail=True)
    end_time: Optional[int] = state_column(filterable=False, detail=True)
    metadata: Optional[dict] = state_column(filterable=False, detail=True)
    runtime_env: Optional[dict] = state_column(filterable=False, detail=True)
    driver_agent_http_address: Optional[str] = state_column(filterable=False, detail=True)
    driver_node_id: Optional[str] = state_column(filterable=False, detail=True)
    driver_exit_code: Optional[int] = state_column(filterable=False, detail=True)


@dataclass
class WorkerState(StateSchema):
    worker_id: str = state_column(filterable=True)
    is_alive: bool = state_column(filterable=True)
    worker_type: str = state_column(filterable=True)
    exit_type: Optional[str] = state_column(filterable=True)
    node_id: str = state_column(filterable=True)
    ip: str = state_column(filterable=True)
    pid: int = state_column(filterable=True)
    exit_detail: Optional[str] = state_column(detail=True, filterable=False)
    worker_launch_time_ms: Optional[int] = state_column(filterable=False, detail=True, format_fn=_timestamp_or_blank)
    worker_launched_time_ms: Optional[int] = state_column(filterable=False, detail=True,
                                                          format_fn=_timestamp_or_blank)
    start_time_ms: Optional[int] = state_column(filterable=False, detail=True, format_fn=Humanify.timestamp)
    end_time_ms: Optional[int] = state_column(filterable=False, detail=True, format_fn=Humanify.timestamp)
    debugger_port: Optional[int] = state_column(filterable=True, detail=True)
    num_paused_threads: Optional[int] = state_column(filterable=True, detail=True)


@dataclass
class TaskState(StateSchema):
    task_id: str = state_column(filterable=True)
    attempt_number: int = state_column(filterable=True)
    name: str = state_column(filterable=True)
    state: str = state_column(filterable=True)
    job_id: str = state_column(filterable=True)
    actor_id: Optional[str] = state_column(filterable=True)
    type: str = state_column(filterable=True)
    func_or_class_name: str = state_column(filterable=True)
    parent_task_id: str = state_column(filterable=True)
    node_id: Optional[str] = state_column(filterable=True)
    worker_id: Optional[str] = state_column(filterable=True)
    worker_pid: Optional[int] = state_column(filterable=True)
    error_type: Optional[str] = state_column(filterable=True)
    language: Optional[str] = state_column(detail=True, filterable=True)
    required_resources: Optional[dict] = state_column(detail=True, filterable=False)
    runtime_env_info: Optional[dict] = state_column(detail=True, filterable=False)
    placement_group_id: Optional[str] = state_column(detail=True, filterable=True)
    events: Optional[List[dict]] = state_column(detail=True, filterable=False)
    profiling_data: Optional[dict] = state_column(detail=True, filterable=False)
    creation_time_ms: Optional[int] = state_column(detail=True, filterable=False, format_fn=Humanify.timestamp)
    start_time_ms: Optional[int] = state_column(detail=True, filterable=False, format_fn=Humanify.timestamp)
    end_time_ms: Optional[int] = state_column(detail=True, filterable=False, format_fn=Humanify.timestamp)
    task_log_info: Optional[dict] = state_column(detail=True, filterable=False)
    error_message: Optional[str] = state_column(detail=True, filterable=False)
    is_debugger_paused: Optional[bool] = state_column(detail=True, filterable=True)


@dataclass
class ObjectState(StateSchema):
    object_id: str = state_column(filterable=True)
    object_size: int = state_column(filterable=True, format_fn=Humanify.memory)
    task_status: str = state_column(filterable=True)
    reference_type: str = state_column(filterable=True)
    call_site: str = state_column(filterable=True)
    type: str = state_column(filterable=True)
    pid: int = state_column(filterable=True)
    ip: str = state_column(filterable=True)


@dataclass
class RuntimeEnvState(StateSchema):
    runtime_env: dict = state_column(filterable=True)
    success: bool = state_column(filterable=True)
    creation_time_ms: Optional[float] = state_column(filterable=False, format_fn=Humanify.timestamp)
    node_id: str = state_column(filterable=True)
    ref_cnt: Optional[int] = state_column(detail=True, filterable=False)
    error: Optional[str] = state_column(detail=True, filterable=True)


_SCHEMAS = {StateResource.ACTORS: ActorState, StateResource.JOBS: JobState, StateResource.NODES: NodeState,
            StateResource.OBJECTS: ObjectState, StateResource.PLACEMENT_GROUPS: PlacementGroupState,
            StateResource.RUNTIME_ENVS: RuntimeEnvState, StateResource.TASKS: TaskState,
            StateResource.WORKERS: WorkerState}


def resource_to_schema(resource):
    return _SCHEMAS[resource]


@dataclass
class ListApiResponse:
    total: int                    # entries at the sources
    num_after_truncation: int     # entries read from them (fewer when a source holds more than it gives)
    num_filtered: int             # entries left after the filters
    result: List[Dict]            # entries returned (at most the limit)
    partial_failure_warning: Optional[str] = ""
    warnings: Optional[List[str]] = None


# Summaries.

@dataclass
class TaskSummaryPerFuncOrClassName:
    func_or_class_name: str
    type: str
    state_counts: Dict[str, int] = field(default_factory=dict)


@dataclass
class TaskSummaries:
    summary: Dict[str, TaskSummaryPerFuncOrClassName]
    total_tasks: int
    total_actor_tasks: int
    total_actor_scheduled: int
    summary_by: str = "func_name"

    @classmethod
    def to_summary_by_func_name(cls, *, tasks):
        """Counts of `tasks` (dicts with TaskState's keys) by function or class name and state."""
        summary, totals = {}, {"NORMAL_TASK": 0, "ACTOR_TASK": 0, "ACTOR_CREATION_TASK": 0}
        for task in tasks:
            key = task["func_or_class_name"]
            s = summary.setdefault(key, TaskSummaryPerFuncOrClassName(func_or_class_name=key, type=task["type"]))
            s.state_counts[task["state"]] = s.state_counts.get(task["state"], 0) + 1
            if task["type"] in totals:
                totals[task["type"]] += 1
        return cls(summary=summary, total_tasks=totals["NORMAL_TASK"], total_actor_tasks=totals["ACTOR_TASK"],
                   total_actor_scheduled=totals["ACTOR_CREATION_TASK"])


@dataclass
class ActorSummaryPerClass:
    class_name: str
    state_counts: Dict[str, int] = field(default_factory=dict)


@dataclass
class ActorSummaries:
    summary: Dict[str, ActorSummaryPerClass]
    total_actors: int
    summary_by: str = "class"

    @classmethod
    def to_summary(cls, *, actors):
        summary = {}
        for actor in actors:
            key = actor["class_name"]
            s = summary.setdefault(key, ActorSummaryPerClass(class_name=key))
            s.state_counts[actor["state"]] = s.state_counts.get(actor["state"], 0) + 1
        return cls(summary=summary, total_actors=len(actors))


@dataclass
class ObjectSummaryPerKey:
    total_objects: int
    total_size_mb: float
    total_num_workers: int
    total_num_nodes: int
    task_state_counts: Dict[str, int] = field(default_factory=dict)
    ref_type_counts: Dict[str, int] = field(default_factory=dict)


@dataclass
class ObjectSummaries:
    summary: Dict[str, ObjectSummaryPerKey]
    total_objects: int
    total_size_mb: float
    callsite_enabled: bool
    summary_by: str = "callsite"

    @classmethod
    def to_summary(cls, *, objects):
        summary, workers, nodes = {}, {}, {}
        total_mb = 0.0
        for o in objects:
            key = o["call_site"]
            s = summary.setdefault(key, ObjectSummaryPerKey(0, 0.0, 0, 0))
            s.task_state_counts[o["task_status"]] = s.task_state_counts.get(o["task_status"], 0) + 1
            s.ref_type_counts[o["reference_type"]] = s.ref_type_counts.get(o["reference_type"], 0) + 1
            s.total_objects += 1
            if o["object_size"] != -1:
                s.total_size_mb += o["object_size"] / 2**20
                total_mb += o["object_size"] / 2**20
            workers.setdefault(key, set()).add(o["pid"])
            nodes.setdefault(key, set()).add(o["ip"])
        for key, s in summary.items():
            s.total_num_workers, s.total_num_nodes = len(workers[key]), len(nodes[key])
        return cls(summary=summary, total_objects=len(objects), total_size_mb=total_mb,
                   callsite_enabled=not any(o["call_site"] == "disabled" for o in objects))


@dataclass
class StateSummary:
    """Node id -> summary; "cluster" is the one key (the summaries are of the whole cluster)."""
    node_id_to_summary: Dict[str, Union[TaskSummaries, ActorSummaries, ObjectSummaries]]
