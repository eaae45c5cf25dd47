"""The cluster CLI: a 3-node cluster (3 raylets on this machine) started with
`phalanx start`, used by a driver, shown by `phalanx status`, stopped clean."""
import json
import os
import subprocess
import sys

import pytest

import phalanx

PHALANX = [sys.executable, "-m", "phalanx.scripts"]


def run(*args, check=True):
    p = subprocess.run(PHALANX + list(args), capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PHALANX_TMPDIR=os.environ["PHALANX_TEST_CLI_DIR"]))
    if check and p.returncode != 0:
        raise AssertionError(f"phalanx {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture
def cli_dir(tmp_path, monkeypatch):
    # The CLI's records and session folders go to a folder of this test's own.
    monkeypatch.setenv("PHALANX_TEST_CLI_DIR", str(tmp_path))
    monkeypatch.setenv("PHALANX_TMPDIR", str(tmp_path))  # the driver finds the CLI's records (and tokens) there
    phalanx.shutdown()
    yield tmp_path
    phalanx.shutdown()
    run("stop", check=False)


def _live_pids(pids):
    return [p for p in pids if os.path.exists(f"/proc/{p}") and
            open(f"/proc/{p}/stat").read().split()[2] != "Z"]


def test_three_node_cluster_start_use_status_stop(cli_dir):
    from phalanx._private.node import free_port
    dash_port = free_port()
    out = run("start", "--head", "--num-cpus", "1", "--dashboard", "--dashboard-port", str(dash_port)).stdout
    assert f"dashboard:         http://127.0.0.1:{dash_port}/" in out
    address = out.split("GCS at ")[1].split()[0]
    run("start", "--address", address, "--num-cpus", "1", "--resources", '{"sim": 2}', "--labels", "zone=z2")
    out = run("start", "--address", address, "--num-cpus", "1", "--num-gpus", "1", "--wait-for-nodes", "3").stdout
    assert "waiting for nodes: " in out and "phalanx: 3 nodes alive" in out

    phalanx.init(address=address)

    @phalanx.remote
    def double(x):
        return 2 * x

    @phalanx.remote
    class Keeper:
        def __init__(self):
            self.v = 0

        def set(self, v):
            self.v = v
            return v
    assert phalanx.get([double.remote(i) for i in range(20)]) == [2 * i for i in range(20)]
    labelled = phalanx.get(phalanx.remote(lambda: phalanx.get_runtime_context().get_node_labels())
                           .options(label_selector={"zone": "z2"}).remote())
    assert labelled["zone"] == "z2"  # (the node started with --labels)
    k = Keeper.options(name="keeper").remote()
    assert phalanx.get(k.set.remote(7)) == 7

    status = run("status", "--address", address).stdout
    assert "nodes (3 alive, 3 known)" in status
    assert "0/2 sim" in status and "0/1 GPU" in status
    assert "ALIVE" in status and "'keeper'" in status
    assert "session folder:" in status
    phalanx.shutdown()

    # status --watch: the same again every 0.2 s, until Ctrl-C.
    import signal
    # (SIGINT as a terminal would give it: a CI that runs the suite in the background starts it with SIGINT
    # ignored, which the child would inherit and keep.)
    watch = subprocess.Popen(PHALANX + ["status", "--address", address, "--watch", "0.2"], stdout=subprocess.PIPE,
                             text=True, env=dict(os.environ, PHALANX_TMPDIR=os.environ["PHALANX_TEST_CLI_DIR"]),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = 0
    for line in watch.stdout:
        seen += line.startswith("phalanx status, every 0.2 s")
        if seen == 2:
            break
    watch.send_signal(signal.SIGINT)
    assert watch.wait(timeout=10) == 0 and seen == 2

    # The dashboard `start --head --dashboard` started: the page's JSON names all three nodes and the actor.
    import urllib.request
    from conftest import wait_until

    def snapshot():
        try:
            return json.load(urllib.request.urlopen(f"http://127.0.0.1:{dash_port}/api/snapshot", timeout=10))
        except OSError:
            return None
    wait_until(lambda: snapshot() is not None, timeout=30, what="the dashboard to answer")
    snap = snapshot()
    assert snap["alive"] == 3 and any(a["name"] == "keeper" for a in snap["actors"]), snap

    # The timeline of the whole cluster, written by the CLI: a row per node, the driver's tasks in it.
    trace_file = cli_dir / "trace.json"
    assert "wrote the timeline" in run("timeline", "--address", address, "-o", str(trace_file)).stdout
    events = json.load(open(trace_file))["traceEvents"]
    assert sum(1 for e in events if e["ph"] == "M" and e["name"] == "process_name") == 3
    assert sum(1 for e in events if e["ph"] == "X" and e["name"].endswith("double")) == 20

    from phalanx import _core
    from phalanx._private.cluster_records import token_for
    host, port = address.split(":")
    os.environ["PHALANX_CLUSTER_TOKEN"] = token_for(address)  # kept in the session folder by `phalanx start`
    pids = [n["pid"] for n in _core.gcs_nodes(host, int(port), 5.0)]
    del os.environ["PHALANX_CLUSTER_TOKEN"]
    assert len(_live_pids(pids)) == 3
    out = run("stop").stdout
    assert "stopped 6 processes" in out  # redis-server, 3 raylets, the dashboard and the job agent
    assert _live_pids(pids) == []
    assert "nothing started here" in run("stop").stdout


def test_join_without_a_cluster_is_a_clear_error(cli_dir):
    from phalanx._private.node import free_port
    p = run("start", "--address", f"127.0.0.1:{free_port()}", check=False)
    assert p.returncode != 0 and "redis-server" in p.stderr


def test_status_without_a_cluster_says_so(cli_dir):
    p = run("status", check=False)
    assert p.returncode != 0 and "no cluster known here" in p.stderr


def test_cluster_off_127_0_0_1_is_protected_by_a_token(cli_dir, monkeypatch):
    # 127.0.0.2 is loopback too, but not the default: the CLI treats it as an
    # address other machines could reach, so redis-server demands a token.
    monkeypatch.delenv("PHALANX_CLUSTER_TOKEN", raising=False)
    out = run("start", "--head", "--num-cpus", "1", "--node-ip", "127.0.0.2").stdout
    address = out.split("GCS at ")[1].split()[0]
    token = out.split("PHALANX_CLUSTER_TOKEN=")[1].split()[0]
    from phalanx import _core
    host, port = address.split(":")
    with pytest.raises(phalanx.UnavailableError, match="PHALANX_CLUSTER_TOKEN"):
        _core.gcs_nodes(host, int(port), 5.0)  # no token: refused
    monkeypatch.setenv("PHALANX_CLUSTER_TOKEN", token)
    assert len(_core.gcs_nodes(host, int(port), 5.0)) == 1
    phalanx.init(address=address)
    assert phalanx.get(phalanx.remote(lambda: 42).remote()) == 42


def test_microbenchmark_runs_from_the_package(cli_dir):
    # `phalanx microbenchmark` is the package's own (python -m phalanx.microbenchmark);
    # one system's measurement, short: the compiled graph rows a run reports.
    p = run("microbenchmark", "--help")
    assert "--peers" in p.stdout
    child = subprocess.run([sys.executable, "-m", "phalanx.microbenchmark", "--_child", "phalanx-dag",
                            "--duration", "0.1", "--reps", "1"], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    rows = json.loads(child.stdout.splitlines()[-1][len("RESULT "):])
    assert rows["compiled graph, 1 actor: execute+get median"] > 0
    assert rows["compiled graph, 3-actor chain: executions/s, 8 in flight"] > 0
    bad = run("microbenchmark", "--peers", "none", "--reps", "x", check=False)
    assert bad.returncode != 0 and "--reps" in bad.stderr
