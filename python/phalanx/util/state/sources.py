"""Where a state query reads: the cluster it is about (resolve_address), the GCS (GcsTables), and for
tasks, workers and objects the raylets, asked through a raylet of this machine (raylet_view: this
process's own connection, or one made for the query and closed after it). Sources.fetch gives the
rows of a resource, how many its sources hold, and which sources did not answer."""
import collections
import contextlib
import os

from phalanx import _core
from phalanx._private import api, driver_record, state, timeline
from phalanx._private.cluster_records import current_head_address, use_cluster
from phalanx.util.state import activity_rows, cluster_rows, object_rows
from phalanx.util.state.common import RAY_MAX_LIMIT_FROM_DATA_SOURCE, StateResource
from phalanx.util.state.directory import Directory
from phalanx.util.state.exception import DataSourceUnavailable, RayStateApiException, ServerUnavailable
from phalanx.util.state.gcs_tables import GcsTables

Fetched = collections.namedtuple("Fetched", "rows total partial_failure")
WORKERS_WINDOW_S = 1.0  # (the workers' list needs the rings, not their records)


def _endpoint(address):
    host, _, port = address.split(",")[0].strip().rpartition(":")
    return ("127.0.0.1" if host == "localhost" else host), port


def same_cluster(a, b):
    return a == b or _endpoint(a) == _endpoint(b)


def resolve_address(address):
    """The GCS address ("HOST:PORT") of the cluster a call is about: `address`, or with None or "auto"
    this process's cluster, else PHALANX_ADDRESS, else the head `phalanx start --head` made here. Its
    token and TLS setting are taken on, as every phalanx client does (cluster_records.use_cluster)."""
    if address in (None, "auto"):
        if state.mode is not None:
            return state.info["gcs_address"]
        address = os.environ.get("PHALANX_ADDRESS") or current_head_address()
        if not address:
            raise ServerUnavailable("no cluster known here: phalanx is not initialized in this process, "
                                    "PHALANX_ADDRESS is not set and `phalanx start --head` was not run on this "
                                    "machine; pass address='HOST:PORT' (the GCS)")
    if not isinstance(address, str):
        raise TypeError(f"address must be 'HOST:PORT' (the GCS), 'auto' or None, got {type(address).__name__}")
    if address.startswith(("http://", "https://", "ray://")):
        raise ValueError(f"phalanx's state API reads the GCS: give its HOST:PORT, not {address!r}")
    if state.mode is None or not same_cluster(state.info["gcs_address"], address):
        use_cluster(address)
    return address


@contextlib.contextmanager
def raylet_view(address):
    """While the block runs, this process reaches the cluster at `address` through a raylet of this
    machine: its own connection, or one made for the block (recorded as no job)."""
    if state.mode is not None:
        if not same_cluster(state.info["gcs_address"], address):
            raise RayStateApiException(
                f"this process is connected to the cluster at {state.info['gcs_address']}; the tasks, workers "
                f"and objects of the cluster at {address} are read through one of its raylets: ask from a process "
                f"not connected to another cluster (`phalanx list tasks --address {address}`)")
        yield
        return
    before, driver_record.recording = driver_record.recording, False
    try:
        api.init(address=address, log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - said with what needs it
        raise DataSourceUnavailable(f"tasks, workers and objects are read through a raylet of the cluster on this "
                                    f"machine, and none could be reached for {address}: {e}") from e
    finally:
        driver_record.recording = before
    try:
        yield
    finally:
        api.shutdown()


def _node_errors(nodes):
    failed = [f"node {n['node_id'][:12]} ({n['address']}): {n['error']}" for n in nodes if n["error"]]
    return ("some nodes did not answer, their part is missing: " + "; ".join(failed)) if failed else ""


class Sources:
    def __init__(self, address, timeout_s):
        self.address = address
        self.timeout_s = timeout_s
        self.gcs = GcsTables(address, timeout_s)

    def _directory(self, actors=()):
        return Directory(self.gcs.nodes(), self.gcs.drivers(), actors)

    def _collect(self, since_s):
        try:
            return timeline.collect(since_s, self.timeout_s)
        except Exception as e:  # noqa: BLE001 - said with the source
            raise DataSourceUnavailable(f"the raylets' records could not be read: {e}") from e

    def _with_dead_actors_pids(self, actors):
        """`actors` with the pid of each dead one that the actor table no longer holds, from its creation's
        record at the raylet (when a raylet of this machine can be asked; else they stay 0)."""
        forgotten = [a for a in actors if a["state"] == "DEAD" and not a["pid"]]
        if not forgotten:
            return actors
        try:
            with raylet_view(self.address):
                pids = activity_rows.worker_pids(self._collect(activity_rows.WINDOW_S))
        except RayStateApiException:
            return actors
        for a in forgotten:
            a["pid"] = pids.get(a["actor_id"], 0)
        return actors

    def fetch(self, resource):
        """The Fetched rows of `resource` (a StateResource)."""
        gcs = self.gcs
        if resource == StateResource.NODES:
            return Fetched(cluster_rows.nodes(gcs.nodes()), None, "")
        if resource == StateResource.ACTORS:
            actors = self._with_dead_actors_pids(gcs.actors())
            return Fetched(cluster_rows.actors(actors, self._directory(actors)), None, "")
        if resource == StateResource.PLACEMENT_GROUPS:
            return Fetched(cluster_rows.placement_groups(gcs.placement_groups(), self._directory()), None, "")
        if resource == StateResource.JOBS:
            return Fetched(cluster_rows.jobs(gcs.submitted_jobs(), self._directory()), None, "")
        if resource == StateResource.RUNTIME_ENVS:
            return Fetched(cluster_rows.runtime_envs(gcs.submitted_jobs(), self._directory()), None, "")
        directory = self._directory(gcs.actors())
        with raylet_view(self.address):
            if resource == StateResource.TASKS:
                trace = self._collect(activity_rows.WINDOW_S)
                rows = activity_rows.TaskRows(directory).rows(trace, gcs.task_records())
                return Fetched(rows, None, _node_errors(trace))
            if resource == StateResource.WORKERS:
                trace = self._collect(WORKERS_WINDOW_S)
                return Fetched(activity_rows.workers(trace, directory), None, _node_errors(trace))
            try:
                nodes = _core.memory_summary(RAY_MAX_LIMIT_FROM_DATA_SOURCE, True, int(self.timeout_s * 1000))
            except Exception as e:  # noqa: BLE001
                raise DataSourceUnavailable(f"the raylets' object tables could not be read: {e}") from e
            total, _ = object_rows.truncated(nodes)
            return Fetched(object_rows.rows(nodes, directory), total, _node_errors(nodes))
