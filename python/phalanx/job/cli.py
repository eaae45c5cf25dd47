"""`phalanx job submit|status|logs|stop|list|delete`: the command line of phalanx.job.

    phalanx job submit [--address HOST:PORT] [--working-dir DIR] [--runtime-env-json JSON]
                       [--submission-id ID] [--no-wait] -- python script.py ARGS
    phalanx job status ID | logs ID [--follow] | stop ID | list | delete ID

`submit` waits for the job and streams its output unless --no-wait, and then exits with 0 if it
succeeded, 1 otherwise (as `ray job submit`)."""
import argparse
import json
import shlex
import sys
import time

from phalanx.job.client import JobStatus, JobSubmissionClient


def add_parser(sub):
    jp = sub.add_parser("job", help="submit a program to run on the cluster's head, follow and stop it",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    jsub = jp.add_subparsers(dest="job_cmd", required=True)
    s = jsub.add_parser("submit", help="run `-- CMD...` on the head with its code and environment")
    s.add_argument("--address", help="the GCS (HOST:PORT); default: PHALANX_ADDRESS or the head started here")
    s.add_argument("--working-dir", help="a local directory (or .zip) uploaded and used as the job's directory")
    s.add_argument("--runtime-env-json", help='a runtime_env as JSON, e.g. \'{"env_vars": {"K": "V"}}\'')
    s.add_argument("--submission-id")
    s.add_argument("--metadata-json", help="str to str, kept with the job")
    s.add_argument("--no-wait", action="store_true", help="print the submission id and return")
    s.add_argument("entrypoint", nargs=argparse.REMAINDER, help="-- the command to run")
    for name, helptext in (("status", "the job's status and message"), ("stop", "stop a running job"),
                           ("delete", "forget an ended job and its output")):
        p = jsub.add_parser(name, help=helptext)
        p.add_argument("--address")
        p.add_argument("submission_id")
    lg = jsub.add_parser("logs", help="the job's output so far (--follow: until it ends)")
    lg.add_argument("--address")
    lg.add_argument("-f", "--follow", action="store_true")
    lg.add_argument("submission_id")
    ls = jsub.add_parser("list", help="every job of the cluster")
    ls.add_argument("--address")


def run(a):
    try:
        client = JobSubmissionClient(a.address)
        return {"submit": _submit, "status": _status, "logs": _logs, "stop": _stop, "list": _list,
                "delete": _delete}[a.job_cmd](client, a)
    except (ValueError, TypeError, NotImplementedError, TimeoutError) as e:  # one line, not a traceback
        print(f"phalanx job {a.job_cmd}: {e}", file=sys.stderr)
        return 1


def _submit(client, a):
    argv = a.entrypoint[1:] if a.entrypoint[:1] == ["--"] else a.entrypoint
    if not argv:
        raise SystemExit("phalanx job submit: give the command after --, e.g. `-- python script.py`")
    try:
        env = json.loads(a.runtime_env_json) if a.runtime_env_json else {}
        metadata = json.loads(a.metadata_json) if a.metadata_json else None
    except ValueError as e:
        raise SystemExit(f"phalanx job submit: not JSON: {e}")
    if a.working_dir:
        env["working_dir"] = a.working_dir
    entrypoint = argv[0] if len(argv) == 1 else shlex.join(argv)
    sid = client.submit_job(entrypoint=entrypoint, runtime_env=env or None, submission_id=a.submission_id,
                            metadata=metadata)
    print(f"phalanx: job {sid} submitted", flush=True)
    if a.no_wait:
        print(f"  status: phalanx job status {sid}\n  output: phalanx job logs --follow {sid}\n"
              f"  stop:   phalanx job stop {sid}")
        return 0
    for piece in client.follow_logs(sid):
        sys.stdout.write(piece)
        sys.stdout.flush()
    info = client.get_job_info(sid)
    print(f"phalanx: job {sid} {info.status}: {info.message}")
    return 0 if info.status == JobStatus.SUCCEEDED else 1


def _status(client, a):
    info = client.get_job_info(a.submission_id)
    print(f"{info.submission_id}: {info.status}  {info.message}")
    return 0


def _logs(client, a):
    if not a.follow:
        sys.stdout.write(client.get_job_logs(a.submission_id))
        return 0
    for piece in client.follow_logs(a.submission_id):
        sys.stdout.write(piece)
        sys.stdout.flush()
    return 0


def _stop(client, a):
    if not client.stop_job(a.submission_id):
        print(f"phalanx: job {a.submission_id} had ended already ({client.get_job_status(a.submission_id)})")
        return 0
    status = client.wait(a.submission_id, timeout_s=30)
    print(f"phalanx: job {a.submission_id} {status}")
    return 0


def _delete(client, a):
    client.delete_job(a.submission_id)
    print(f"phalanx: job {a.submission_id} deleted")
    return 0


def _list(client, a):
    jobs = client.list_jobs()
    if not jobs:
        print("no jobs")
        return 0
    print(f"{'SUBMISSION ID':<30} {'STATUS':<10} {'STARTED':<20} ENTRYPOINT")
    for j in jobs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.start_time / 1000)) if j.start_time else "-"
        print(f"{j.submission_id:<30} {str(j.status):<10} {started:<20} {j.entrypoint}")
    return 0
