"""Each driver's record in the GCS, for the state API's jobs (phalanx.util.state.list_jobs).

    driver_jobs   hash: job id (hex) -> JSON {job_id, client_id, node_id, pid, start_time, end_time,
                  namespace, entrypoint (sys.argv), submission_id, runtime_env}

Written once by init() and once more by shutdown() (end_time set); never on a task's path. A
record is best effort: a GCS that does not answer within TIMEOUT_S costs init and shutdown that
long and leaves the job unlisted, nothing more. A driver killed before its shutdown stays without an
end_time (the state API says so where it can tell)."""
import json
import logging
import os
import sys
import time

from phalanx import _core
from phalanx._private import state
from phalanx._private.rpc_tables import primary

KEY = "driver_jobs"
TIMEOUT_S = 2.0
recording = True  # False in a process that joins a cluster only to look at it (the `phalanx list` CLI)

log = logging.getLogger("phalanx")
_record = None  # this driver's record while it is connected


def _put(record):
    host, port = primary(state.info["gcs_address"], TIMEOUT_S)
    _core.redis_command(host, port, ["HSET", KEY, record["job_id"], json.dumps(record)], TIMEOUT_S)


def started(namespace, runtime_env):
    """Records the driver that init() just connected (state.job_id, state.info)."""
    global _record
    if not recording:
        return
    _record = {"job_id": state.job_id.hex(), "client_id": state.info["client_id"].hex(),
               "node_id": state.info["node_id"].hex(), "pid": os.getpid(), "start_time": int(time.time() * 1000),
               "end_time": None, "namespace": namespace, "entrypoint": " ".join(sys.argv),
               "submission_id": os.environ.get("PHALANX_JOB_ID") or None,
               "runtime_env": json.loads(json.dumps(runtime_env or {}, default=str))}
    try:
        _put(_record)
    except Exception as e:  # noqa: BLE001 - the job is then not listed; the driver goes on
        log.debug("phalanx: could not record driver job %s in the GCS: %s", _record["job_id"], e)


def finished():
    """Marks this driver's record ended (shutdown(), before it disconnects)."""
    global _record
    if _record is None:
        return
    record, _record = _record, None
    record["end_time"] = int(time.time() * 1000)
    try:
        _put(record)
    except Exception as e:  # noqa: BLE001 - as above
        log.debug("phalanx: could not mark driver job %s ended in the GCS: %s", record["job_id"], e)


def read_all(host, port, timeout_s):
    """Every driver record of the GCS at host:port, as dicts."""
    raw = _core.redis_command(host, port, ["HGETALL", KEY], timeout_s) or []
    return [json.loads(raw[i + 1]) for i in range(0, len(raw), 2)]
