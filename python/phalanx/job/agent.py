"""JobAgent: runs the jobs submitted to a cluster, on its head (`phalanx start --head` starts it as
`python -m phalanx.job.agent`; `phalanx stop` ends it and the jobs it runs).

It takes submission ids from the GCS's queue (python/phalanx/job/table.py), unpacks the job's
runtime_env packages under the session folder (once per package, as workers do), and runs the
entrypoint with /bin/sh in a process group of its own: in working_dir, with env_vars set, working_dir
and py_modules on PYTHONPATH, the folder of the agent's Python first on PATH (so `python` is the one
phalanx is installed in), and PHALANX_ADDRESS / PHALANX_JOB_ID / PHALANX_JOB_RUNTIME_ENV so
that `phalanx.init()` in the script joins this cluster with the job's environment. The driver's
output goes to SESSION/logs/job-ID.log and, as it comes, to the GCS (for `phalanx job logs
--follow` anywhere); its end is recorded (SUCCEEDED, FAILED with the exit code or signal, or
STOPPED). A stop request ends it with SIGTERM, then SIGKILL after STOP_GRACE_S."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

from phalanx._private import runtime_env
from phalanx._private.rpc_tables import alive_nodes
from phalanx.job.table import JobTable

STOP_GRACE_S = 5.0
_BEAT_EVERY_S = 2.0


class _Running:
    def __init__(self, record, proc, log_path):
        self.record = record
        self.proc = proc
        self.log_path = log_path
        self.sent = 0  # bytes of the log file passed to the GCS
        self.log_full = False
        self.stop_at = None  # when SIGKILL follows the SIGTERM of a stop


class JobAgent:
    def __init__(self, table, session_dir, gcs_address):
        self._table = table
        self._session_dir = session_dir
        self._address = gcs_address
        self._running = {}
        self._stopping = False
        self._beat_at = 0.0

    def stop(self, *_):
        self._stopping = True

    def run(self):
        orphans_checked = False
        while not self._stopping:
            try:
                if not orphans_checked:
                    self._fail_orphans()
                    orphans_checked = True
                now = time.monotonic()
                if now >= self._beat_at:
                    self._table.beat(f"{os.getpid()}@{socket.gethostname()}")
                    self._beat_at = now + _BEAT_EVERY_S
                submission_id = self._table.next(0.2)
                if submission_id is not None:
                    self._start(submission_id)
                self._service()
            except Exception as e:  # noqa: BLE001 - the GCS away (restarting, failing over): try again
                print(f"job agent: {type(e).__name__}: {e}; trying again", file=sys.stderr, flush=True)
                time.sleep(0.5)
        for r in list(self._running.values()):  # the cluster stops: so do its jobs
            self._signal(r, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while self._running and time.monotonic() < deadline:
            self._service(stopping=True)
            time.sleep(0.05)
        for r in list(self._running.values()):
            self._signal(r, signal.SIGKILL)
            r.proc.wait()
            self._ended(r, "the cluster was stopped")

    def _head(self):
        """The head's node id (hex) and address: the node whose agent this is (its first node)."""
        try:
            nodes = alive_nodes(self._address)
        except Exception:  # noqa: BLE001 - the GCS away for a moment: the record goes without them
            return None, ""
        if not nodes:
            return None, ""
        head = min(nodes, key=lambda n: n["start_time_ms"])
        return head["node_id"], head["address"]

    def _fail_orphans(self):
        """Jobs an earlier agent was running when it went: they cannot be followed any more."""
        for record in self._table.all():
            if record["status"] == "RUNNING":
                record.update(status="FAILED", end_time=int(time.time() * 1000), error_type="JOB_SUPERVISOR_ACTOR_DIED",
                              message="the job agent that ran it stopped (the head restarted?)")
                self._table.put(record)

    def _start(self, submission_id):
        record = self._table.get(submission_id)
        if record is None or record["status"] != "PENDING":
            return  # (deleted meanwhile)
        if submission_id in self._table.stop_requested():
            self._table.clear_stop(submission_id)
            record.update(status="STOPPED", message="stopped before it started", end_time=int(time.time() * 1000))
            self._table.put(record)
            return
        log_path = os.path.join(self._session_dir, "logs", f"job-{submission_id}.log")
        try:
            cwd, env = self._environment(record)
            log = open(log_path, "wb")
            try:
                proc = subprocess.Popen(["/bin/sh", "-c", record["entrypoint"]], cwd=cwd, env=env, stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            finally:
                log.close()
        except Exception as e:  # noqa: BLE001 - recorded as the job's failure
            record.update(status="FAILED", end_time=int(time.time() * 1000),
                          error_type="JOB_ENTRYPOINT_COMMAND_START_ERROR",
                          message=f"the job could not be started: {type(e).__name__}: {e}")
            self._table.put(record)
            return
        node_id, node_ip = self._head()
        record.update(status="RUNNING", start_time=int(time.time() * 1000), driver_pid=proc.pid, log_path=log_path,
                      driver_ip=node_ip, driver_node_id=node_id, message=f"running on {socket.gethostname()}")
        self._running[submission_id] = _Running(record, proc, log_path)  # (followed even if the GCS is away now)
        self._table.put(record)

    def _environment(self, record):
        """(the driver's directory, its environment variables) for the job's runtime_env."""
        env = dict(os.environ)
        stored = record.get("runtime_env") or {}
        root = os.path.join(self._session_dir, "runtime_resources")
        fetch = self._table.get_package
        local = {}
        paths = []
        if stored.get("py_modules"):
            paths += [runtime_env.unpacked(bytes.fromhex(p[4:]), root, fetch) for p in stored["py_modules"]]
            # (for the driver's own tasks: each module the packages hold, as a py_modules entry)
            local["py_modules"] = [os.path.join(d, n) for d in paths for n in sorted(os.listdir(d))]
        cwd = None
        if stored.get("working_dir"):
            cwd = local["working_dir"] = runtime_env.unpacked(bytes.fromhex(stored["working_dir"][4:]), root, fetch)
            paths.insert(0, cwd)
        if stored.get("env_vars"):
            local["env_vars"] = stored["env_vars"]
            env.update(stored["env_vars"])
        if stored.get("worker_process_setup_hook"):  # (a 'module.function': run in each of the job's workers)
            local["worker_process_setup_hook"] = stored["worker_process_setup_hook"]
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        # `python` in an entrypoint is the Python phalanx runs in (the one with phalanx installed).
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable)] + ([env["PATH"]] if env.get("PATH") else []))
        env.update(PHALANX_ADDRESS=self._address, PHALANX_JOB_ID=record["submission_id"],
                   PHALANX_JOB_RUNTIME_ENV=json.dumps(local), PYTHONUNBUFFERED="1")
        return cwd or self._session_dir, env

    def _service(self, stopping=False):
        stops = set() if stopping or not self._running else self._table.stop_requested()
        for submission_id, r in list(self._running.items()):
            self._pump(r)
            if submission_id in stops and r.stop_at is None:
                self._table.clear_stop(submission_id)
                self._signal(r, signal.SIGTERM)
                r.stop_at = time.monotonic() + STOP_GRACE_S
            if r.stop_at is not None and time.monotonic() > r.stop_at:
                self._signal(r, signal.SIGKILL)
            if r.proc.poll() is not None:
                self._ended(r, "stopped by request" if r.stop_at is not None else None)

    def _pump(self, r):
        """Passes the driver's new output to the GCS."""
        if r.log_full:
            return
        with open(r.log_path, "rb") as f:
            f.seek(r.sent)
            data = f.read(1 << 20)
        if data:
            kept = self._table.append_log(r.record["submission_id"], data)  # (raises with the GCS away: sent again)
            r.sent += len(data)
            r.log_full = not kept

    def _signal(self, r, sig):
        try:
            os.killpg(r.proc.pid, sig)
        except ProcessLookupError:
            pass

    def _ended(self, r, stopped_why):
        self._pump(r)
        while not r.log_full and r.sent < os.path.getsize(r.log_path):
            self._pump(r)
        del self._running[r.record["submission_id"]]
        self._table.forget_log(r.record["submission_id"])
        code = r.proc.returncode
        record = r.record
        record.update(end_time=int(time.time() * 1000), driver_exit_code=code)
        if stopped_why:
            record.update(status="STOPPED", message=stopped_why)
        elif code == 0:
            record.update(status="SUCCEEDED", message="the driver exited with code 0")
        elif code < 0:
            record.update(status="FAILED", message=f"the driver was killed by signal {-code}",
                          error_type="JOB_ENTRYPOINT_COMMAND_ERROR")
        else:
            record.update(status="FAILED", message=f"the driver exited with code {code}",
                          error_type="JOB_ENTRYPOINT_COMMAND_ERROR")
        if r.log_full:
            record["message"] += f" (the GCS kept the first 16 MiB of its output; all of it: {r.log_path})"
        self._table.put(record)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m phalanx.job.agent", description=__doc__.split("\n")[0])
    ap.add_argument("--address", required=True, help="the GCS (HOST:PORT)")
    ap.add_argument("--session-dir", required=True)
    a = ap.parse_args(argv)
    agent = JobAgent(JobTable(a.address), a.session_dir, a.address)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
