"""The dashboard (docs/observability.md), in a real browser: headless
Chromium from Debian loads the page of a two-node cluster on loopback and
the test reads what the page drew (the DOM after its script ran): the
three nodes, the actor the test created, alive, a reduce's steps and a
broadcast. It also takes the screenshot
docs/observability.md shows (PHALANX_SCREENSHOTS=DIR keeps it there). The
API asks for the cluster token when the server has one."""
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import phalanx

from conftest import loopback_nodes

pytest.importorskip("aiohttp", reason="the dashboard needs aiohttp (pip install 'phalanx[dashboard]')")
from phalanx import dashboard  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MIB = 1 << 20


@phalanx.remote(resources={"b": 0.01})
def _made_there(n):
    return np.full(n, 1.0, dtype=np.float32)


@phalanx.remote
def _made_here(n):
    return np.full(n, 2.0, dtype=np.float32)


@phalanx.remote
def _first(x):
    return float(x[0])


@phalanx.remote
class Learner:
    def __init__(self):
        self.steps = 0

    def step(self, grads):
        self.steps += 1
        return self.steps


def _browser(*args):
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--virtual-time-budget=10000", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def _workload():
    learner = Learner.options(name="learner").remote()
    for _ in range(3):
        grads = [_made_there.remote(MIB) for _ in range(2)] + [_made_here.remote(MIB) for _ in range(2)]
        total = phalanx.collective.reduce(grads, op="sum", timeout=60)
        phalanx.get(learner.step.remote(total), timeout=60)
    assert phalanx.get(_made_there.remote(4 * MIB), timeout=60)[0] == 1.0  # 16 MiB copied to the driver's node
    # A broadcast: one object made here, read on "b" and on "c".
    policy = _made_here.remote(4 * MIB)
    readers = [_first.options(resources={r: 0.01}).remote(policy) for r in ("b", "c")]
    assert phalanx.get(readers, timeout=60) == [2.0, 2.0]
    return learner


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium (Debian's chromium) is not installed: "
                                             "scripts/test.sh installs it")
def test_the_page_shows_the_nodes_and_an_actor_the_test_created(tmp_path):
    with loopback_nodes([None, {"b": 1}, {"c": 1}]):
        nodes = [n["node_id"] for n in phalanx.nodes()]
        learner = _workload()  # (kept: the actor ends with its last handle, as in Ray)
        port, stop = dashboard.start_in_thread()
        try:
            url = f"http://127.0.0.1:{port}/"
            snap = json.load(urllib.request.urlopen(url + "api/snapshot", timeout=30))
            assert {n["node_id"] for n in snap["nodes"]} == set(nodes)
            assert any(a["class_name"].endswith("Learner") and a["name"] == "learner" for a in snap["actors"])
            assert snap["links"]["series"] and snap["collectives"] and snap["copies"]
            # Each run counted once, direct actor calls included.
            runs = {t["name"].rsplit(".", 1)[-1]: t for t in snap["tasks"]}
            assert runs["_made_there"]["finished"] == 7 and runs["_made_there"]["failed"] == 0
            assert runs["step"]["finished"] == 3
            # Counters: each node's, and the cluster's sum.
            assert set(snap["node_stats"]) == {n[:12] for n in nodes}
            assert snap["stats"]["tasks_finished"] == sum(c["tasks_finished"] for c in snap["node_stats"].values())
            assert snap["stats"]["reduce_chains"] >= 1
            # The broadcast: the object copied to two nodes, each copy a hop.
            hops = [c for c in snap["collectives"] if c["what"] == "broadcast"]
            assert any(" to 2 nodes: " in c["name"] and c["bytes"] >= 16 * MIB for c in hops), snap["collectives"]
            dom = _browser("--dump-dom", url)
            shot = os.path.join(os.environ.get("PHALANX_SCREENSHOTS", str(tmp_path)), "dashboard.png")
            _browser("--hide-scrollbars", "--window-size=1400,1900", f"--screenshot={shot}", url)
        finally:
            stop.set()
    # What the page drew: a row per node, the actor alive, the tasks it ran, the reduce's steps.
    for node in nodes:
        assert f'data-node="{node}"' in dom
    assert "test_dashboard.Learner</td><td>learner</td>" in dom and ">ALIVE<" in dom
    assert "Learner.step" in dom and "reduce step: sum" in dom
    assert "actor Learner (worker " in dom  # (the timeline's row of the actor's worker)
    assert "3 of 3 nodes alive" in dom and "broadcast: object " in dom
    with open(shot, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000


def test_the_api_asks_for_the_token_when_the_server_has_one():
    with loopback_nodes([None]):
        port, stop = dashboard.start_in_thread(token="s3cret")
        try:
            url = f"http://127.0.0.1:{port}/"
            for path, headers in (("api/snapshot", {}), ("api/snapshot", {"Authorization": "Bearer wrong"}),
                                  ("", {}), ("?token=wrong", {})):
                with pytest.raises(urllib.error.HTTPError) as e:
                    urllib.request.urlopen(urllib.request.Request(url + path, headers=headers), timeout=30)
                assert e.value.code == 401
            ok = urllib.request.urlopen(urllib.request.Request(url + "api/snapshot",
                                                               headers={"Authorization": "Bearer s3cret"}), timeout=30)
            assert json.load(ok)["alive"] == 1
            # ?token= once: a cookie, then the page loads without it.
            opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
            page = opener.open(url + "?token=s3cret", timeout=30).read().decode()
            assert "<title>phalanx dashboard</title>" in page
            assert json.load(opener.open(url + "api/snapshot", timeout=30))["alive"] == 1
        finally:
            stop.set()


def test_an_open_page_asks_only_for_what_is_new_and_shows_the_same():
    """The server keeps each ring's records between snapshots (data.Rings)
    and asks the nodes only for what ended since their last answer. After
    more work its records are, ring by ring, those a fresh read of the whole
    window finds (none twice, none missed), and the runs by name agree."""
    from phalanx._private import timeline as tl
    from phalanx.dashboard import data

    def runs(snap):
        return {t["name"].rsplit(".", 1)[-1]: (t["finished"], t["failed"]) for t in snap["tasks"]}

    with loopback_nodes([None, {"b": 1}]):
        rings = data.Rings(window_s=300.0)
        phalanx.get([_made_there.remote(16) for _ in range(20)], timeout=60)
        assert runs(data.snapshot(rings=rings))["_made_there"] == (20, 0)
        assert rings.asked_s == 300.0  # (the first: the whole window)
        time.sleep(1.0)
        phalanx.get([_made_there.remote(16) for _ in range(30)] + [_made_here.remote(16) for _ in range(10)],
                    timeout=60)
        kept = data.snapshot(rings=rings)
        assert rings.asked_s < 30.0  # since the last answer, and the margin
        fresh = data.snapshot()
        assert runs(kept) == runs(fresh) and runs(kept)["_made_there"] == (50, 0), (runs(kept), runs(fresh))
        live = [n["node_id"] for n in phalanx.nodes()]
        by_ring = [{(n["node_id"], r["pid"], r["label"]): set(r["records"]["seq"].tolist())
                    for n in nodes for r in n["rings"] if r["label"] != "in flight"}
                   for nodes in (rings.collect(live), tl.collect(300.0))]
    assert by_ring[0] == by_ring[1]
    assert sum(len(s) for s in by_ring[0].values()) >= 100  # (runs and their tasks on the raylets)
