"""Jobs: `phalanx job submit/status/logs/stop/list/delete` and phalanx.job.JobSubmissionClient against a
head started with `phalanx start --head` (whose job agent runs the drivers): the driver runs in the job's
working_dir with its env_vars and py_modules and joins the cluster with `phalanx.init()`; its output is
streamed and kept; its exit status recorded in the GCS; a stop ends it; bad input is refused clearly."""
import os
import socket
import subprocess
import sys
import zipfile

import pytest

import phalanx
from phalanx.job import JobStatus, JobSubmissionClient
from phalanx.job.table import JobTable

PHALANX = [sys.executable, "-m", "phalanx.scripts"]


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    cli = str(tmp_path_factory.mktemp("cli"))
    phalanx.shutdown()

    def run(*args, check=True, timeout=120):
        env = dict(os.environ, PHALANX_TMPDIR=cli)  # (the token: the one the head kept there)
        env.pop("PHALANX_CLUSTER_TOKEN", None)
        p = subprocess.run(PHALANX + list(args), capture_output=True, text=True, timeout=timeout, env=env)
        if check and p.returncode != 0:
            raise AssertionError(f"phalanx {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}")
        return p

    out = run("start", "--head", "--num-cpus", "2").stdout
    address = out.split("GCS at ")[1].split()[0]
    before = {k: os.environ.get(k) for k in ("PHALANX_TMPDIR", "PHALANX_CLUSTER_TOKEN", "PHALANX_TLS")}
    os.environ["PHALANX_TMPDIR"] = cli  # (the client finds the head's token there, as a user's would)
    os.environ.pop("PHALANX_CLUSTER_TOKEN", None)  # (not a token an earlier test's cluster left here)
    os.environ.pop("PHALANX_TLS", None)
    try:
        yield address, run
    finally:
        run("stop", check=False)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _project(root):
    os.makedirs(root / "lib" / "shapes", exist_ok=True)
    (root / "lib" / "shapes" / "__init__.py").write_text("def area(w, h):\n    return w * h\n")
    (root / "proj").mkdir(exist_ok=True)
    (root / "proj" / "helper.py").write_text("K = 10\n")
    (root / "proj" / "train.py").write_text(
        "import os, sys\n"
        "import phalanx, helper, shapes\n"
        "phalanx.init()\n"
        "@phalanx.remote\n"
        "def f(x):\n"
        "    import helper, shapes\n"
        "    return shapes.area(x, helper.K), os.environ.get('MODE')\n"
        "print('files', sorted(n for n in os.listdir('.') if n.endswith('.py')), 'MODE', os.environ['MODE'])\n"
        "print('results', phalanx.get([f.remote(i) for i in range(3)]))\n"
        "sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)\n")
    return str(root / "proj"), str(root / "lib" / "shapes")


def test_a_job_runs_on_the_head_with_its_code_and_environment_and_its_end_is_recorded(head, tmp_path):
    address, run = head
    proj, shapes = _project(tmp_path)
    client = JobSubmissionClient(address)
    env = {"working_dir": proj, "py_modules": [shapes], "env_vars": {"MODE": "fast"}}
    ok = client.submit_job(entrypoint="python train.py", runtime_env=env, metadata={"owner": "test"})
    failing = client.submit_job(entrypoint="python train.py 3", runtime_env=env, submission_id="exits-3")
    assert client.wait(ok, timeout_s=120) == JobStatus.SUCCEEDED
    assert client.wait(failing, timeout_s=120) == JobStatus.FAILED
    logs = client.get_job_logs(ok)
    assert "files ['helper.py', 'train.py'] MODE fast" in logs
    assert "results [(0, 'fast'), (10, 'fast'), (20, 'fast')]" in logs
    info = client.get_job_info(failing)
    assert (info.driver_exit_code, info.message) == (3, "the driver exited with code 3")
    assert info.error_type == "JOB_ENTRYPOINT_COMMAND_ERROR"
    from phalanx.util.state import list_nodes
    head_node = min(list_nodes(address=address), key=lambda n: n.start_time_ms)
    assert info.driver_node_id == head_node.node_id
    assert info.driver_info.node_ip_address == head_node.node_ip and int(info.driver_info.pid) > 0
    assert client.get_job_info(ok).error_type is None
    # Recorded in the GCS, as anyone reading it finds it.
    record = JobTable(address).get(ok)
    assert (record["status"], record["driver_exit_code"], record["metadata"]) == ("SUCCEEDED", 0, {"owner": "test"})
    assert record["runtime_env"]["working_dir"].startswith("pkg:")
    assert os.path.exists(record["log_path"])
    assert {ok, "exits-3"} <= {j.submission_id for j in client.list_jobs()}
    out = run("job", "list").stdout
    assert "exits-3" in out and "FAILED" in out
    assert "FAILED  the driver exited with code 3" in run("job", "status", "exits-3").stdout
    assert client.delete_job("exits-3")
    with pytest.raises(ValueError, match="no job with submission id 'exits-3'"):
        client.get_job_status("exits-3")


def test_submit_on_the_command_line_streams_the_output_and_exits_with_the_jobs_result(head, tmp_path):
    address, run = head
    proj, _ = _project(tmp_path)
    (tmp_path / "proj" / "count.py").write_text(
        "import sys, time\nfor i in range(5):\n    print('tick', i, flush=True)\n    time.sleep(0.1)\n"
        "sys.exit(int(sys.argv[1]))\n")
    p = run("job", "submit", "--address", address, "--working-dir", proj, "--", "python", "count.py", "0")
    assert [line for line in p.stdout.splitlines() if line.startswith("tick")] == [f"tick {i}" for i in range(5)]
    assert "SUCCEEDED" in p.stdout.splitlines()[-1]
    p = run("job", "submit", "--working-dir", proj, "--", "python", "count.py", "2", check=False)
    assert p.returncode == 1 and "FAILED: the driver exited with code 2" in p.stdout


def test_a_stopped_job_ends_and_says_so_and_logs_follow_until_the_end(head):
    address, run = head
    client = JobSubmissionClient(address)
    sid = client.submit_job(entrypoint="python -c \"import time; print('up', flush=True); time.sleep(120)\"")
    pieces = client.follow_logs(sid)
    assert next(pieces).startswith("up")  # (streamed while it runs)
    assert client.get_job_status(sid) == JobStatus.RUNNING
    out = run("job", "stop", sid).stdout
    assert f"job {sid} STOPPED" in out
    assert list(pieces) == []  # (the follow ends with the job)
    assert client.get_job_info(sid).message == "stopped by request"
    assert not client.stop_job(sid)  # (ended already)


def test_bad_submissions_are_refused_naming_what_is_wrong(head, tmp_path, monkeypatch):
    address, run = head
    client = JobSubmissionClient(address)
    with pytest.raises(NotImplementedError, match="'pip' is not supported"):
        client.submit_job(entrypoint="python x.py", runtime_env={"pip": ["requests"]})
    with pytest.raises(ValueError, match="entrypoint must be a non-empty shell command"):
        client.submit_job(entrypoint="  ")
    with pytest.raises(ValueError, match="submission_id must be"):
        client.submit_job(entrypoint="true", submission_id="../etc")
    client.submit_job(entrypoint="true", submission_id="twice")
    with pytest.raises(ValueError, match="a job with submission id 'twice' exists already"):
        client.submit_job(entrypoint="true", submission_id="twice")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("../../outside.txt", "x")
    with pytest.raises(ValueError, match=r"entry '\.\./\.\./outside\.txt' is a path that climbs out"):
        client.submit_job(entrypoint="true", runtime_env={"working_dir": str(evil)})
    big = tmp_path / "big"
    big.mkdir()
    (big / "blob.bin").write_bytes(b"x" * 700_000)
    monkeypatch.setenv("PHALANX_RUNTIME_ENV_MAX_MB", "0.5")
    p = run("job", "submit", "--working-dir", str(big), "--", "true", check=False)
    assert p.returncode == 1 and "holds 0.7 MiB, over the limit of 0.5 MiB" in p.stderr
    p = run("job", "status", "no-such-job", check=False)
    assert p.returncode == 1 and "no job with submission id 'no-such-job'" in p.stderr
    with pytest.raises(ValueError, match="give its HOST:PORT"):
        JobSubmissionClient("http://127.0.0.1:8265")
    with pytest.raises(ValueError, match="a job's driver runs on the head, whose labels are"):
        client.submit_job(entrypoint="true", entrypoint_label_selector={"zone": "mars"})


def test_a_clients_metadata_goes_with_every_job_it_submits(head):
    address, _ = head
    client = JobSubmissionClient(address, metadata={"team": "rl", "owner": "client"}, headers={"X-Who": "me"},
                                 verify=False, create_cluster_if_needed=False)
    assert client.get_address() == address and client.get_version() == phalanx.__version__
    sid = client.submit_job(entrypoint="true", metadata={"owner": "job"})
    assert client.get_job_info(sid).metadata == {"team": "rl", "owner": "job"}
    assert client.wait(sid, timeout_s=60) == JobStatus.SUCCEEDED


def test_a_cluster_without_a_job_agent_says_so(fresh_cluster):
    info = fresh_cluster()  # (an embedded cluster runs no job agent)
    with pytest.raises(phalanx.exceptions.UnavailableError, match="no job agent answers"):
        JobSubmissionClient(info["gcs_address"]).submit_job(entrypoint="true")


def test_the_job_table_keeps_one_connection_and_opens_it_again_after_the_gcs_restarts(tmp_path, monkeypatch):
    from phalanx import _core
    from phalanx._private.node import redis_binary
    from conftest import wait_until
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = os.urandom(16).hex()

    def serve():
        return subprocess.Popen([redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--requirepass", token,
                                 "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def answers():
        try:
            return _core.redis_command("127.0.0.1", port, ["PING"], 1.0) == b"PONG"
        except Exception:  # noqa: BLE001 - not up yet
            return False

    monkeypatch.setenv("PHALANX_CLUSTER_TOKEN", token)
    monkeypatch.delenv("PHALANX_TLS", raising=False)
    server = serve()
    try:
        wait_until(answers, what="redis-server up")
        table = JobTable(f"127.0.0.1:{port}")
        table._cmd("CLIENT", "SETNAME", "first")
        assert table.append_log("j1", b"a" * 10) and table.append_log("j1", b"b" * 5)
        assert table._cmd("CLIENT", "GETNAME") == b"first"  # (every command on the one connection)
        assert table.read_log("j1") == b"a" * 10 + b"b" * 5
        server.kill()
        server.wait()
        server = serve()
        wait_until(answers, what="redis-server up again")
        # The connection found broken is opened again once, and the command is not lost.
        table.put({"submission_id": "j2", "status": "PENDING"})
        assert table.get("j2")["status"] == "PENDING" and table._cmd("CLIENT", "GETNAME") is None
        monkeypatch.setenv("PHALANX_CLUSTER_TOKEN", "not-the-token")
        with pytest.raises(phalanx.exceptions.UnavailableError, match="token"):
            JobTable(f"127.0.0.1:{port}").get("j2")
    finally:
        server.kill()
        server.wait()


def test_followed_logs_keep_a_character_cut_between_two_reads():
    class Table:  # (the GCS as follow_logs sees it: the output arrives in two pieces, the cut inside "é")
        def __init__(self):
            self.data, self.reads = "café\n".encode(), 0

        def get(self, submission_id):
            return {"status": "RUNNING" if self.reads < 2 else "SUCCEEDED"}

        def read_log(self, submission_id, offset):
            self.reads += 1
            return self.data[offset:4] if self.reads == 1 else self.data[offset:]

    client = JobSubmissionClient.__new__(JobSubmissionClient)
    client.address, client._table = "127.0.0.1:1", Table()
    assert "".join(client.follow_logs("j", poll_s=0)) == "café\n"
