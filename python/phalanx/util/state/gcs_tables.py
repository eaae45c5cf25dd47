"""GcsTables: what the state API reads from the GCS (redis-server), as dicts: the node table, the
actor table (with the fields _core.gcs_actors leaves out: resources, detached, a detached actor's
creation spec), the placement groups, the task records, the drivers' records and the submitted jobs.

One authenticated connection for the calls of one state query (the cluster's token and TLS setting
from the environment, as every phalanx client). Every command has the query's timeout; a GCS that
does not answer raises DataSourceUnavailable naming the table. Not thread-safe."""
import json

from phalanx import _core
from phalanx._private import driver_record
from phalanx._private.rpc_tables import primary
from phalanx.util.state import wire
from phalanx.util.state.exception import DataSourceUnavailable

_ACTOR_STATES = ("PENDING", "ALIVE", "RESTARTING", "DEAD")
_PG_STATES = ("PENDING", "CREATED", "REMOVED", "RESCHEDULING")
_PG_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
TASK_STATES = ("PENDING", "RUNNING", "FINISHED", "FAILED")


def _hex(raw):
    return raw.hex() if raw else ""


class GcsTables:
    def __init__(self, address, timeout_s):
        self.address = address
        self.timeout_s = timeout_s
        try:
            self._gcs = _core.RedisSession(address, timeout_s)
        except Exception as e:  # noqa: BLE001 - said with the address
            raise DataSourceUnavailable(f"cannot reach the GCS at {address}: {e}") from e

    def _cmd(self, what, *args):
        try:
            return self._gcs.command(list(args), self.timeout_s)
        except Exception as e:  # noqa: BLE001 - said with the table
            raise DataSourceUnavailable(f"the GCS at {self.address} did not give {what} within "
                                        f"{self.timeout_s:g} s: {e}") from e

    def _hash_values(self, what, key):
        raw = self._cmd(what, "HGETALL", key) or []
        return [raw[i + 1] for i in range(0, len(raw), 2)]

    def nodes(self):
        """The node table (as rpc_tables.all_nodes)."""
        try:
            host, port = primary(self.address, self.timeout_s)
            return _core.gcs_nodes(host, int(port), self.timeout_s)
        except Exception as e:  # noqa: BLE001
            raise DataSourceUnavailable(f"the GCS at {self.address} did not give its node table: {e}") from e

    def actors(self):
        """[{actor_id, name, class_name, state, node_id, pid, restarts, death_cause, resources, detached,
        owner_node, spec: {job_id, namespace, placement_group_id} (detached actors only, else {})}]."""
        out = []
        for raw in self._hash_values("the actor table", "actors"):
            f = wire.fields(raw)
            spec = wire.fields(wire.one(f, 16, b""))
            out.append({"actor_id": _hex(wire.one(f, 1)), "name": wire.text(f, 2), "class_name": wire.text(f, 3),
                        "state": _ACTOR_STATES[wire.one(f, 4, 0) & 3], "node_id": _hex(wire.one(f, 5)),
                        "pid": wire.one(f, 6, 0), "restarts": wire.one(f, 7, 0), "death_cause": wire.text(f, 8),
                        "resources": wire.string_double_map(f, 9), "owner_node": _hex(wire.one(f, 14)),
                        "detached": bool(wire.one(f, 15, 0)),
                        "spec": {"job_id": _hex(wire.one(spec, 29)), "namespace": wire.text(spec, 30),
                                 "placement_group_id": _hex(wire.one(spec, 34))} if spec else {}})
        return out

    def placement_groups(self):
        """[{placement_group_id, name, namespace, strategy, state, bundles: [{resources, node_id}],
        why_pending, creator_id, detached}] (the newest 1000 removed ones are kept)."""
        out = []
        for raw in self._hash_values("the placement group table", "placement_groups"):
            f = wire.fields(raw)
            bundles = []
            for b in f.get(5, []):
                bf = wire.fields(b)
                bundles.append({"resources": wire.string_double_map(bf, 1), "node_id": _hex(wire.one(bf, 2))})
            out.append({"placement_group_id": _hex(wire.one(f, 1)), "name": wire.text(f, 2),
                        "namespace": wire.text(f, 3), "strategy": _PG_STRATEGIES[wire.one(f, 4, 0) & 3],
                        "state": _PG_STATES[wire.one(f, 6, 0) & 3], "bundles": bundles,
                        "why_pending": wire.text(f, 8), "creator_id": _hex(wire.one(f, 9)),
                        "detached": bool(wire.one(f, 10, 0))})
        return out

    def task_records(self):
        """The raylets' records of ended tasks whose results are still held: [{task_id, function_name,
        state, node_id, attempt, error, finish_time_ms, num_returns}]."""
        out = []
        for raw in self._hash_values("the task records", "tasks"):
            f = wire.fields(raw)
            out.append({"task_id": _hex(wire.one(f, 1)), "function_name": wire.text(f, 2),
                        "state": TASK_STATES[wire.one(f, 3, 0) & 3], "node_id": _hex(wire.one(f, 4)),
                        "attempt": wire.one(f, 5, 0), "error": wire.text(f, 6),
                        "finish_time_ms": wire.one(f, 7, 0), "num_returns": wire.one(f, 8, 0)})
        return out

    def drivers(self):
        """The drivers' records (phalanx/_private/driver_record.py)."""
        return [json.loads(v) for v in self._hash_values("the drivers' records", driver_record.KEY)]

    def submitted_jobs(self):
        """The submitted jobs' records (phalanx/job/table.py)."""
        return [json.loads(v) for v in self._hash_values("the submitted jobs", "jobs")]

    def job_log(self, submission_id):
        """A submitted job's output as the GCS keeps it (its first 16 MiB)."""
        return self._cmd("the job's output", "GETRANGE", "job_logs:" + submission_id, "0", "-1") or b""
