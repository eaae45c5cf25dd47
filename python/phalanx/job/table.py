"""JobTable: the jobs' records in the GCS (redis-server), as the submission client and the head's job
agent share them. Each side keeps one authenticated connection (the cluster token from
PHALANX_CLUSTER_TOKEN, TLS when PHALANX_TLS=1; opened again at the primary of the moment when the
GCS restarted or a replica took over), so neither side needs a raylet.

    jobs            hash: submission id -> the job's record (JSON: entrypoint, status, times, exit code, ...)
    job_queue       list: submission ids the agent has not started yet
    job_stops       set: submission ids someone asked to stop
    job_logs:ID     string: the driver's output so far (at most MAX_LOG_BYTES; the whole is on the head)
    job_agent       string: the agent's pid and host, expiring unless it beats (AGENT_TTL_S)
    packages:HEX    string: a runtime_env package (a zip) by its id: stored once"""
import json

from phalanx import _core

MAX_LOG_BYTES = 16 << 20
AGENT_TTL_S = 10


class JobTable:
    def __init__(self, address):
        self.address = address
        self._gcs = _core.RedisSession(address, 5.0)
        self._log_bytes = {}  # submission id -> bytes of its output in the GCS (as the last APPEND said)

    def _cmd(self, *args, timeout=5.0):
        return self._gcs.command([a if isinstance(a, (bytes, str)) else str(a) for a in args], timeout)

    # Records.
    def put(self, info):
        self._cmd("HSET", "jobs", info["submission_id"], json.dumps(info, sort_keys=True))

    def add(self, info):
        """Records a new job; False if its submission id is taken."""
        return self._cmd("HSETNX", "jobs", info["submission_id"], json.dumps(info, sort_keys=True)) == 1

    def get(self, submission_id):
        raw = self._cmd("HGET", "jobs", submission_id)
        return json.loads(raw) if raw else None

    def all(self):
        raw = self._cmd("HGETALL", "jobs") or []
        return [json.loads(raw[i + 1]) for i in range(0, len(raw), 2)]

    def delete(self, submission_id):
        self._cmd("HDEL", "jobs", submission_id)
        self._cmd("DEL", "job_logs:" + submission_id)
        self._log_bytes.pop(submission_id, None)

    # The queue and stop requests.
    def enqueue(self, submission_id):
        self._cmd("RPUSH", "job_queue", submission_id)

    def next(self, wait_s):
        """The next submission id to start, waiting up to `wait_s`; None if none came."""
        got = self._cmd("BLPOP", "job_queue", f"{wait_s:.3f}", timeout=wait_s + 5.0)
        return got[1].decode() if got else None

    def request_stop(self, submission_id):
        self._cmd("SADD", "job_stops", submission_id)

    def stop_requested(self):
        return {s.decode() for s in self._cmd("SMEMBERS", "job_stops") or []}

    def clear_stop(self, submission_id):
        self._cmd("SREM", "job_stops", submission_id)

    # Output.
    def append_log(self, submission_id, data):
        """Appends the driver's output; False once the GCS holds MAX_LOG_BYTES of it (nothing more kept there)."""
        key = "job_logs:" + submission_id
        have = self._log_bytes.get(submission_id)
        if have is None:
            have = self._cmd("STRLEN", key)  # (once per job: an agent that restarted goes on from there)
        if have >= MAX_LOG_BYTES:
            return False
        self._log_bytes[submission_id] = self._cmd("APPEND", key, data[:MAX_LOG_BYTES - have])
        return have + len(data) <= MAX_LOG_BYTES

    def forget_log(self, submission_id):
        """Drops what this table remembers of a job's output (its length) once nothing more is appended."""
        self._log_bytes.pop(submission_id, None)

    def read_log(self, submission_id, offset=0):
        return self._cmd("GETRANGE", "job_logs:" + submission_id, offset, -1) or b""

    # Packages and the agent.
    def put_package(self, pid, data):
        self._cmd("SET", "packages:" + pid.hex(), data, "NX", timeout=120.0)

    def get_package(self, pid):
        data = self._cmd("GET", "packages:" + pid.hex(), timeout=120.0)
        if data is None:
            raise LookupError(f"runtime_env package {pid.hex()} is not in the GCS")
        return data

    def beat(self, agent):
        self._cmd("SET", "job_agent", agent, "EX", AGENT_TTL_S)

    def agent(self):
        got = self._cmd("GET", "job_agent")
        return got.decode() if got else None
