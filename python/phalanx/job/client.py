"""JobSubmissionClient: Ray's job API (ray.job_submission) for phalanx clusters.

    from phalanx.job import JobSubmissionClient, JobStatus
    client = JobSubmissionClient("HEAD:6379")
    sid = client.submit_job(entrypoint="python train.py", runtime_env={"working_dir": "."})
    client.get_job_status(sid)            # JobStatus.RUNNING ...
    print(client.get_job_logs(sid))
    client.stop_job(sid)

A job is recorded in the GCS and started by the job agent on the head (`phalanx start --head` runs
one; python/phalanx/job/agent.py): its driver runs there, its output is kept and its exit code
recorded. The client needs the GCS address and the cluster token (this user's `phalanx start` on
this machine keeps it; elsewhere export PHALANX_CLUSTER_TOKEN)."""
import asyncio
import codecs
import dataclasses
import enum
import os
import re
import time

from phalanx._private import runtime_env
from phalanx._private.cluster_records import current_head_address, use_cluster
from phalanx.exceptions import UnavailableError
from phalanx.job.table import JobTable

_SUBMISSION_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class JobStatus(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def is_terminal(self):
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)

    def __str__(self):
        return self.value


class JobType(str, enum.Enum):
    """Ray's: how a job began (phalanx's jobs table holds submitted ones)."""
    SUBMISSION = "SUBMISSION"
    DRIVER = "DRIVER"


class JobErrorType(str, enum.Enum):
    """Ray's error types of a failed job, those phalanx's agent can meet."""
    JOB_ENTRYPOINT_COMMAND_START_ERROR = "JOB_ENTRYPOINT_COMMAND_START_ERROR"
    JOB_ENTRYPOINT_COMMAND_ERROR = "JOB_ENTRYPOINT_COMMAND_ERROR"
    JOB_SUPERVISOR_ACTOR_DIED = "JOB_SUPERVISOR_ACTOR_DIED"  # (the agent or its head went while it ran)


@dataclasses.dataclass
class DriverInfo:
    """Ray's: the job's driver process (`id` is the submission id: phalanx's driver is the entrypoint itself)."""
    id: str
    node_ip_address: str
    pid: str


@dataclasses.dataclass
class JobDetails:
    """A job as Ray's JobDetails shows it (times in ms since the epoch)."""
    submission_id: str
    entrypoint: str
    status: JobStatus
    message: str = ""
    start_time: int = None
    end_time: int = None
    driver_exit_code: int = None
    metadata: dict = dataclasses.field(default_factory=dict)
    runtime_env: dict = dataclasses.field(default_factory=dict)
    log_path: str = ""
    type: str = "SUBMISSION"
    error_type: str = None            # a JobErrorType's value once it failed
    driver_info: DriverInfo = None    # once its driver started
    driver_node_id: str = None        # the head's node id (hex), once its driver started
    driver_agent_http_address: str = None  # (Ray's dashboard agent; phalanx's agent speaks through the GCS: None)
    entrypoint_label_selector: dict = None

    @property
    def job_id(self):
        return self.submission_id

    @classmethod
    def of(cls, record):
        fields = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in record.items() if k in fields}
        d["status"] = JobStatus(d["status"])
        if record.get("driver_pid") is not None:
            d["driver_info"] = DriverInfo(id=record["submission_id"], node_ip_address=record.get("driver_ip", ""),
                                          pid=str(record["driver_pid"]))
        return cls(**d)


JobInfo = JobDetails  # (Ray's JobInfo is JobDetails' parent: the same fields here)


class JobSubmissionClient:
    def __init__(self, address=None, create_cluster_if_needed=False, cookies=None, metadata=None, headers=None,
                 verify=True):
        """Ray's keywords: `metadata` is added to every job this client submits (a job's own wins);
        `create_cluster_if_needed` is Ray's hint for third-party job managers (Ray starts nothing either);
        `cookies`, `headers` and `verify` are for Ray's HTTP dashboard, which phalanx's jobs do not go through
        (they go through the GCS with the cluster token): kept, unused."""
        if metadata is not None and not (isinstance(metadata, dict) and
                                         all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
            raise TypeError(f"metadata must be a dict of str to str, got {metadata!r}")
        self._default_metadata = dict(metadata or {})
        self._cookies, self._headers, self._verify = cookies, headers, verify
        self._create_cluster_if_needed = create_cluster_if_needed
        address = address or os.environ.get("PHALANX_ADDRESS") or current_head_address()
        if not address:
            raise UnavailableError("no cluster known here: pass the head's GCS address (HOST:PORT), set "
                                   "PHALANX_ADDRESS, or run `phalanx start --head` on this machine")
        if address.startswith(("http://", "https://")):  # (Ray's clients give the dashboard's URL)
            raise ValueError(f"phalanx jobs go through the GCS: give its HOST:PORT, not {address!r}")
        use_cluster(address)  # (the token and TLS setting this user's `phalanx start` kept for it)
        self.address = address
        self._table = JobTable(address)

    def get_address(self):
        """The cluster's GCS address this client uses (Ray's: its dashboard's)."""
        return self.address

    def get_version(self):
        """The version of the jobs service (phalanx's)."""
        import phalanx
        return phalanx.__version__

    def submit_job(self, *, entrypoint, runtime_env=None, submission_id=None, metadata=None, job_id=None,
                   entrypoint_num_cpus=None, entrypoint_num_gpus=None, entrypoint_memory=None,
                   entrypoint_resources=None, entrypoint_label_selector=None):
        """Queues `entrypoint` (a shell command) to run on the head with `runtime_env`; its submission id."""
        for name, v in (("entrypoint_num_cpus", entrypoint_num_cpus), ("entrypoint_num_gpus", entrypoint_num_gpus),
                        ("entrypoint_memory", entrypoint_memory), ("entrypoint_resources", entrypoint_resources)):
            if v:
                raise NotImplementedError(f"{name}: a job's driver runs on the head without a resource "
                                          "reservation in phalanx; give its tasks and actors the resources")
        if not isinstance(entrypoint, str) or not entrypoint.strip():
            raise ValueError(f"entrypoint must be a non-empty shell command, got {entrypoint!r}")
        submission_id = submission_id or job_id or "phalanxjob_" + os.urandom(8).hex()
        if not _SUBMISSION_ID.match(submission_id):
            raise ValueError(f"submission_id must be 1-64 letters, digits, '_', '.' or '-', got {submission_id!r}")
        if metadata is not None and not (isinstance(metadata, dict) and
                                         all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
            raise TypeError(f"metadata must be a dict of str to str, got {metadata!r}")
        if entrypoint_label_selector:
            from phalanx._private import labels
            wanted = labels.parse_selector(entrypoint_label_selector, "entrypoint_label_selector")
            head = labels.head_labels(self.address)
            if not labels.matches(head, wanted):
                raise ValueError(f"entrypoint_label_selector {entrypoint_label_selector!r}: a job's driver runs on "
                                 f"the head, whose labels are {head!r}")
        metadata = {**self._default_metadata, **(metadata or {})}
        agent = self._table.agent()
        if agent is None:
            raise UnavailableError(f"no job agent answers for the cluster at {self.address}: jobs are run by the "
                                   "agent `phalanx start --head` starts on the head (is the head up?)")
        record = {"submission_id": submission_id, "entrypoint": entrypoint, "status": "PENDING",
                  "message": "waiting for the job agent on the head", "metadata": metadata,
                  "entrypoint_label_selector": dict(entrypoint_label_selector or {}) or None,
                  "runtime_env": self._stored_env(runtime_env), "submit_time": int(time.time() * 1000)}
        if not self._table.add(record):
            raise ValueError(f"a job with submission id {submission_id!r} exists already")
        self._table.enqueue(submission_id)
        return submission_id

    def _stored_env(self, env):
        """The job's runtime_env with its directories zipped and stored in the GCS (by content)."""
        runtime_env.check(env, "submit_job()")
        if not env:
            return {}
        hook = env.get("worker_process_setup_hook")
        if hook is not None and not isinstance(hook, str):  # (the job's driver imports it: Ray's words)
            raise ValueError(f"Invalid type {type(hook)} for `worker_process_setup_hook`. A job's runtime_env "
                             f"takes a 'module.function' string")
        out = {k: v for k, v in env.items() if k in ("env_vars", "worker_process_setup_hook")}
        excludes = list(env.get("excludes") or ())
        if env.get("working_dir") is not None:
            out["working_dir"] = self._store(os.fspath(env["working_dir"]), excludes, False)
        if env.get("py_modules") is not None:
            out["py_modules"] = [self._store(runtime_env._module_path(m), excludes, True) for m in env["py_modules"]]
        return out

    def _store(self, path, excludes, as_module):
        pid, data = runtime_env.package(path, excludes, as_module)
        self._table.put_package(pid, data)
        return "pkg:" + pid.hex()

    def _record(self, submission_id):
        r = self._table.get(submission_id)
        if r is None:
            raise ValueError(f"no job with submission id {submission_id!r} at {self.address}")
        return r

    def get_job_info(self, submission_id):
        return JobDetails.of(self._record(submission_id))

    def get_job_status(self, submission_id):
        return JobStatus(self._record(submission_id)["status"])

    def list_jobs(self):
        return sorted((JobDetails.of(r) for r in self._table.all()), key=lambda j: j.start_time or 0)

    def get_job_logs(self, submission_id):
        self._record(submission_id)
        return self._table.read_log(submission_id).decode(errors="replace")

    def stop_job(self, submission_id):
        """Asks the agent to stop the job (SIGTERM, then SIGKILL); False if it had ended already."""
        if JobStatus(self._record(submission_id)["status"]).is_terminal():
            return False
        self._table.request_stop(submission_id)
        return True

    def delete_job(self, submission_id):
        """Forgets an ended job and its output; ValueError while it runs."""
        status = JobStatus(self._record(submission_id)["status"])
        if not status.is_terminal():
            raise ValueError(f"job {submission_id} is {status}: stop it before deleting it")
        self._table.delete(submission_id)
        return True

    def follow_logs(self, submission_id, poll_s=0.2):
        """Yields the job's output as it comes (str pieces) until it has ended and all was read."""
        offset = 0
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # (a character cut between two reads)
        while True:
            status = JobStatus(self._record(submission_id)["status"])  # (read first: nothing is missed at the end)
            data = self._table.read_log(submission_id, offset)
            if data:
                offset += len(data)
                piece = text.decode(data)
                if piece:
                    yield piece
            elif status.is_terminal():
                rest = text.decode(b"", final=True)
                if rest:
                    yield rest
                return
            else:
                time.sleep(poll_s)

    async def tail_job_logs(self, submission_id):
        """Ray's async form of follow_logs."""
        loop = asyncio.get_running_loop()
        it = self.follow_logs(submission_id)
        while True:
            piece = await loop.run_in_executor(None, next, it, None)
            if piece is None:
                return
            yield piece

    def wait(self, submission_id, timeout_s=None, poll_s=0.2):
        """The job's status once it has ended (TimeoutError after `timeout_s`)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = self.get_job_status(submission_id)
            if status.is_terminal():
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {submission_id} is still {status} after {timeout_s} s")
            time.sleep(poll_s)
