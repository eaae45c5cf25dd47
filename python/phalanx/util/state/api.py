"""Ray's state API (ray.util.state): list, get and summarize the cluster's actors, tasks, objects,
nodes, jobs, placement groups, workers and runtime environments, with Ray's arguments:

    from phalanx.util.state import list_actors, get_task, summarize_tasks
    list_actors(filters=[("state", "=", "ALIVE")], limit=100, detail=False)

address: None (this process's cluster; else PHALANX_ADDRESS or the head started here), "auto" (the
same) or "HOST:PORT" (the GCS). filters: (key, "=" or "!=", value) tuples, ANDed; string values
match without regard to case; a key that is not a filterable column, or another predicate, is an
error naming the valid ones. limit: at most this many (default 100). timeout: seconds for each source.
detail: the detail columns too (else None). raise_on_missing_output: raise RayStateApiException when
a source did not answer or held more than it gave (else the output is what came). _explain: warn of
a missing part, of truncation and of the limit cutting the output (Ray's warnings).

Where each resource's rows come from: cluster_rows.py, activity_rows.py, object_rows.py, and
docs/observability.md ("The state API")."""
import dataclasses
import warnings

from phalanx.util.state import listing
from phalanx.util.state.common import (DEFAULT_LIMIT, DEFAULT_RPC_TIMEOUT, RAY_MAX_LIMIT_FROM_API_SERVER,
                                       ActorSummaries, GetApiOptions, ListApiOptions, ObjectSummaries,
                                       StateResource, StateSummary, SummaryApiOptions, SummaryResource,
                                       TaskSummaries, resource_to_schema)
from phalanx.util.state.exception import RayStateApiException
from phalanx.util.state.sources import Sources, resolve_address

_ID_KEY = {StateResource.NODES: "node_id", StateResource.ACTORS: "actor_id",
           StateResource.PLACEMENT_GROUPS: "placement_group_id", StateResource.WORKERS: "worker_id",
           StateResource.TASKS: "task_id", StateResource.OBJECTS: "object_id", StateResource.JOBS: "submission_id"}

_ORDER = {
    StateResource.ACTORS: lambda r: r["actor_id"],
    StateResource.NODES: lambda r: r["node_id"],
    StateResource.PLACEMENT_GROUPS: lambda r: r["placement_group_id"],
    StateResource.JOBS: lambda r: (r["start_time"] or 0, r["job_id"] or "", r["submission_id"] or ""),
    StateResource.WORKERS: lambda r: (r["worker_type"] != "DRIVER", r["node_id"], r["pid"]),  # (drivers first)
    StateResource.TASKS: lambda r: (r["creation_time_ms"] or r["end_time_ms"] or 0, r["task_id"], r["attempt_number"]),
    StateResource.OBJECTS: lambda r: (-r["object_size"], r["object_id"], r["pid"] or 0, r["reference_type"]),
    StateResource.RUNTIME_ENVS: lambda r: (r["node_id"] or "", repr(sorted(r["runtime_env"].items()))),
}


def _resource(resource, kind=StateResource):
    if isinstance(resource, kind):
        return resource
    try:
        return kind(str(resource).replace("-", "_"))
    except ValueError:
        raise ValueError(f"unknown resource {resource!r}; one of {[r.value for r in kind]}") from None


def _print_api_warning(resource, response, warn_limit=True):
    """Ray's warnings of a response: a source's failure, truncation at a source, the limit."""
    if response.partial_failure_warning:
        warnings.warn(response.partial_failure_warning)
    if response.total > response.num_after_truncation:
        warnings.warn(f"The returned data may contain incomplete result. {response.num_after_truncation} "
                      f"({response.total} total from the cluster) {resource.value} are retrieved from the data "
                      f"source. {response.total - response.num_after_truncation} entries have been truncated. Max "
                      f"of {response.num_after_truncation} entries are retrieved from data source to prevent "
                      "over-sized payloads.")
    if warn_limit and response.num_filtered > len(response.result):
        warnings.warn(f"Limit last {len(response.result)} entries (Total {response.num_filtered}). Use `--filter` "
                      "to reduce the amount of data to return or setting a higher limit with `--limit` to see all "
                      "data. ")


def _raise_on_missing_output(resource, response):
    if response.partial_failure_warning:
        raise RayStateApiException(f"Failed to retrieve all {resource.value} from the cluster because they are "
                                   "not reachable due to query failures to the data sources. To avoid raising an "
                                   "exception and allow having missing output, set `raise_on_missing_output=False`. "
                                   f"({response.partial_failure_warning})")
    if response.total != response.num_after_truncation:
        raise RayStateApiException(f"Failed to retrieve all {response.total} {resource.value} from the cluster "
                                   "because they are not reachable due to data truncation. It happens when the "
                                   f"returned data is too large (> {response.num_after_truncation}) To avoid raising "
                                   "an exception and allow having missing output, set "
                                   "`raise_on_missing_output=False`. ")


class StateApiClient:
    """Queries one cluster's state (Ray's StateApiClient; cookies, headers and verify are accepted for
    Ray's signature and unused: phalanx reads the GCS and the raylets, not an HTTP server)."""

    def __init__(self, address=None, cookies=None, headers=None, verify=True):
        self._address = resolve_address(address)

    @property
    def address(self):
        return self._address

    def _response(self, resource, options):
        schema = resource_to_schema(resource)
        listing.check_columns(options.filters, schema)  # (before any source is asked)
        listing.check_limit(options.limit)
        fetched = Sources(self._address, options.timeout).fetch(resource)
        return listing.select(fetched.rows, schema, options, _ORDER[resource], fetched.total, fetched.partial_failure)

    def list(self, resource, options, raise_on_missing_output, _explain=False):
        """The states of `resource` (a StateResource or its name) that ListApiOptions `options` select."""
        resource = _resource(resource)
        if options.has_conflicting_filters():
            return []
        response = self._response(resource, options)
        if raise_on_missing_output:
            _raise_on_missing_output(resource, response)
        if _explain:
            _print_api_warning(resource, response)
        return response.result

    def get(self, resource, id, options, _explain=False):
        """The state of `resource` with id `id`: None when there is none; for objects a list (one per
        holder, [] when none); for a task with several attempts, the list of them."""
        resource = _resource(resource)
        if resource not in _ID_KEY:
            raise ValueError(f"Can't get {resource.name} by id.")
        options = options or GetApiOptions()
        lister = ListApiOptions(limit=RAY_MAX_LIMIT_FROM_API_SERVER, timeout=options.timeout, detail=True,
                                server_timeout_multiplier=1.0)
        response = self._response(resource, lister)
        key, wanted = _ID_KEY[resource], str(id).lower()
        found = [s for s in response.result if str(s[key]).lower() == wanted or
                 (resource == StateResource.JOBS and str(s["job_id"]).lower() == wanted)]
        if _explain:
            _print_api_warning(resource, response, warn_limit=False)
        if resource == StateResource.OBJECTS:
            return found
        if not found:
            return None
        return found[0] if len(found) == 1 else found

    def summary(self, resource, *, options, raise_on_missing_output, _explain=False):
        """{"cluster": the summary of `resource` (tasks by function, actors by class, objects by call
        site) as a dict}."""
        resource = _resource(resource, SummaryResource)
        state_resource = StateResource(resource.value)
        lister = ListApiOptions(limit=RAY_MAX_LIMIT_FROM_API_SERVER, timeout=options.timeout, detail=True,
                                filters=options.filters, server_timeout_multiplier=1.0)
        response = self._response(state_resource, lister)
        rows = [s.asdict() for s in response.result]
        if resource == SummaryResource.TASKS:
            summary = TaskSummaries.to_summary_by_func_name(tasks=rows)
        elif resource == SummaryResource.ACTORS:
            summary = ActorSummaries.to_summary(actors=rows)
        else:
            summary = ObjectSummaries.to_summary(objects=rows)
        if raise_on_missing_output:
            _raise_on_missing_output(state_resource, response)
        if _explain:
            _print_api_warning(state_resource, response, warn_limit=False)
        return dataclasses.asdict(StateSummary(node_id_to_summary={"cluster": summary}))["node_id_to_summary"]


def _list(resource, address, filters, limit, timeout, detail, raise_on_missing_output, _explain):
    return StateApiClient(address=address).list(
        resource, options=ListApiOptions(limit=limit, timeout=timeout, filters=filters, detail=detail),
        raise_on_missing_output=raise_on_missing_output, _explain=_explain)


def _get(resource, id, address, timeout, _explain):
    return StateApiClient(address=address).get(resource, id, GetApiOptions(timeout=timeout), _explain=_explain)


def _summarize(resource, address, timeout, raise_on_missing_output, _explain):
    return StateApiClient(address=address).summary(resource, options=SummaryApiOptions(timeout=timeout),
                                                   raise_on_missing_output=raise_on_missing_output,
                                                   _explain=_explain)


def list_actors(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT, detail=False,
                raise_on_missing_output=True, _explain=False):
    """The actors of the cluster (the GCS's actor table), as ActorStates."""
    return _list(StateResource.ACTORS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_placement_groups(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT,
                          detail=False, raise_on_missing_output=True, _explain=False):
    """The placement groups of the cluster (removed ones too), as PlacementGroupStates."""
    return _list(StateResource.PLACEMENT_GROUPS, address, filters, limit, timeout, detail, raise_on_missing_output,
                 _explain)


def list_nodes(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT, detail=False,
               raise_on_missing_output=True, _explain=False):
    """The nodes of the cluster (dead ones too), as NodeStates."""
    return _list(StateResource.NODES, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_jobs(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT, detail=False,
              raise_on_missing_output=True, _explain=False):
    """The submitted jobs and the drivers' jobs, as JobStates."""
    return _list(StateResource.JOBS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_workers(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT, detail=False,
                 raise_on_missing_output=True, _explain=False):
    """The worker processes and drivers of the cluster, as WorkerStates."""
    return _list(StateResource.WORKERS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_tasks(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT, detail=False,
               raise_on_missing_output=True, _explain=False):
    """The tasks, actor creations and actor calls of the last hour, and older ones whose results are held,
    one TaskState per attempt."""
    return _list(StateResource.TASKS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_objects(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT, detail=False,
                 raise_on_missing_output=True, _explain=False):
    """The objects of every live node, one ObjectState per object and holder, largest first."""
    return _list(StateResource.OBJECTS, address, filters, limit, timeout, detail, raise_on_missing_output, _explain)


def list_runtime_envs(address=None, filters=None, limit=DEFAULT_LIMIT, timeout=DEFAULT_RPC_TIMEOUT, detail=False,
                      raise_on_missing_output=True, _explain=False):
    """The runtime environments jobs were given, as RuntimeEnvStates."""
    return _list(StateResource.RUNTIME_ENVS, address, filters, limit, timeout, detail, raise_on_missing_output,
                 _explain)


def get_actor(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    """The ActorState of actor `id` (hex), or None."""
    return _get(StateResource.ACTORS, id, address, timeout, _explain)


def get_job(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    """The JobState of the job with submission id (or job id) `id`, or None."""
    return _get(StateResource.JOBS, id, address, timeout, _explain)


def get_placement_group(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    """The PlacementGroupState of group `id` (hex), or None."""
    return _get(StateResource.PLACEMENT_GROUPS, id, address, timeout, _explain)


def get_node(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    """The NodeState of node `id` (hex), or None."""
    return _get(StateResource.NODES, id, address, timeout, _explain)


def get_worker(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    """The WorkerState of worker `id` (a worker_id of list_workers), or None."""
    return _get(StateResource.WORKERS, id, address, timeout, _explain)


def get_task(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    """The TaskState of task `id` (hex, or an ObjectRef the task returns): None, one, or a list of its
    attempts when there were several."""
    if not isinstance(id, str):
        id = id.task_id().hex()
    return _get(StateResource.TASKS, id, address, timeout, _explain)


def get_objects(id, address=None, timeout=DEFAULT_RPC_TIMEOUT, _explain=False):
    """The ObjectStates of object `id` (hex): one per holder; [] when it is nowhere."""
    return _get(StateResource.OBJECTS, id, address, timeout, _explain)


def summarize_tasks(address=None, timeout=DEFAULT_RPC_TIMEOUT, raise_on_missing_output=True, _explain=False,
                    headers=None, verify=True):
    """{"cluster": TaskSummaries as a dict}: tasks counted by function (or class) name and state."""
    return _summarize(SummaryResource.TASKS, address, timeout, raise_on_missing_output, _explain)


def summarize_actors(address=None, timeout=DEFAULT_RPC_TIMEOUT, raise_on_missing_output=True, _explain=False,
                     headers=None, verify=True):
    """{"cluster": ActorSummaries as a dict}: actors counted by class and state."""
    return _summarize(SummaryResource.ACTORS, address, timeout, raise_on_missing_output, _explain)


def summarize_objects(address=None, timeout=DEFAULT_RPC_TIMEOUT, raise_on_missing_output=True, _explain=False,
                      headers=None, verify=True):
    """{"cluster": ObjectSummaries as a dict}: objects counted by call site (all "disabled": not recorded)."""
    return _summarize(SummaryResource.OBJECTS, address, timeout, raise_on_missing_output, _explain)
