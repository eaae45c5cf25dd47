"""The timeline (docs/observability.md): phalanx.timeline() writes a Chrome
trace of a two-node cluster on loopback with a row per node, the tasks and
actor calls each worker ran, each task's time queued and running on its
node, the copies between the nodes (bytes, source node) with arrows from
the task that made each object, and the reduce's steps; every node's clock
offset is measured."""
import json
import os
import signal
import time

import numpy as np

import phalanx

from conftest import loopback_nodes, wait_until

MIB = 1 << 20


@phalanx.remote(resources={"b": 0.01})
def _there(n):
    return np.full(n, 1.0, dtype=np.float32)


@phalanx.remote
def _here(x):
    time.sleep(0.01)
    return x + 1


@phalanx.remote
class _Counter:
    def __init__(self):
        self.n = 0

    def add(self):
        self.n += 1
        return self.n


def _events(path):
    with open(path) as f:
        trace = json.load(f)
    return trace, trace["traceEvents"]


def test_the_timeline_shows_tasks_copies_and_reduce_steps_of_every_node(tmp_path):
    with loopback_nodes([None, {"b": 1}]):
        b_node = next(n["node_id"] for n in phalanx.nodes() if "b" in n["resources_total"])
        assert phalanx.get([_here.remote(i) for i in range(10)], timeout=60) == list(range(1, 11))
        counter = _Counter.remote()
        assert phalanx.get([counter.add.remote() for _ in range(5)], timeout=60)[-1] == 5
        assert phalanx.get(_here.remote(_here.remote(1)), timeout=60) == 3  # a result as an argument
        big = _there.remote(4 * MIB)  # 16 MiB made on "b", copied here by the get
        assert phalanx.get(big, timeout=60).shape == (4 * MIB,)
        # (16 MiB inputs: a chain pays for itself on loopback even when a loaded machine's round trips are
        # slow; with 4 MiB ones the reduce measured its link under a parallel test run and fetched instead)
        inputs = [_there.remote(4 * MIB), _here.remote(np.ones(4 * MIB, np.float32)), _there.remote(4 * MIB),
                  _here.remote(np.ones(4 * MIB, np.float32))]
        phalanx.wait(inputs, num_returns=4, timeout=60, fetch_local=False)
        total = phalanx.collective.reduce(inputs, op="sum", timeout=60)
        assert float(phalanx.get(total, timeout=60)[0]) == 6.0
        assert phalanx.cluster_stats()["reduce_chains"] >= 1
        path = tmp_path / "trace.json"
        assert phalanx.timeline(str(path)) is None
        trace, events = _events(path)

    rows = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(rows) == 2 and any(b_node[:12] in name for name in rows.values()), rows
    b_row = next(pid for pid, name in rows.items() if b_node[:12] in name)
    runs = [e for e in events if e["ph"] == "X"]
    # Every task and actor call ran in a worker row, on its node.
    assert sum(1 for e in runs if e["name"].endswith("_here")) == 14
    assert sum(1 for e in runs if e["name"].endswith("_Counter.add")) == 5
    # The actor's worker row says whose it is.
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    adds = {(e["pid"], e["tid"]) for e in runs if e["name"].endswith("_Counter.add")}
    assert len(adds) == 1 and threads[adds.pop()].startswith("actor _Counter (worker "), threads
    assert {e["pid"] for e in runs if e["name"].endswith("_there")} == {b_row}
    assert all(e["dur"] > 0 for e in runs)
    here_runs = [e for e in runs if e["name"].endswith("_here")]
    assert min(e["dur"] for e in here_runs) >= 10000  # us: each slept 10 ms
    # Each task's time on its node: queued, then running, as async spans that begin and end.
    queued = [e for e in events if e.get("cat") == "task on node" and e["name"].startswith("queued: ")]
    assert sum(1 for e in queued if e["ph"] == "b") == sum(1 for e in queued if e["ph"] == "e") >= 13
    # A task sent to "b" shows on the driver's node as sent, and on "b" as queued then run.
    sent = [e for e in events if e.get("cat") == "task on node" and e["ph"] == "b" and e["name"].startswith("sent to")]
    assert sent and all(e["name"].startswith(f"sent to node {b_node[:12]}: ") for e in sent)
    assert any(e["pid"] == b_row and e["name"].endswith("_there") for e in queued)
    # The 16 MiB copy to the driver's node, from "b", with an arrow from the task that made it.
    copies = [e for e in events if e.get("cat") == "transfer" and e["ph"] == "b"]
    big_copy = next(e for e in copies if e["args"]["bytes"] >= 16 * MIB)
    assert big_copy["args"]["from_node"] == b_node[:12] and big_copy["pid"] != b_row
    assert big_copy["args"]["chunks"] >= 1 and big_copy["args"]["MB_per_s"] > 0
    # An arrow from a task to the task that took its result as an argument.
    args = [e for e in events if e.get("cat") == "argument"]
    assert any(e["ph"] == "s" for e in args) and any(e["ph"] == "f" for e in args)
    flows = [e for e in events if e.get("cat") == "object"]
    assert any(e["ph"] == "s" and e["pid"] == b_row for e in flows)
    assert any(e["ph"] == "f" and e["pid"] != b_row for e in flows)
    # The reduce's steps (a chain over the inputs' nodes).
    steps = [e for e in events if e.get("cat") == "collective" and e["ph"] == "b"]
    assert steps and all(e["name"].startswith("reduce step: sum") for e in steps), steps
    # Both nodes' clocks, the other one's offset measured over a round trip.
    clocks = trace["otherData"]["clock_offsets"]
    assert len(clocks) == 2 and clocks[b_node[:12]]["rtt_ns"] > 0


def test_a_killed_worker_still_shows_what_it_ran(tmp_path):
    """A worker's events live in a file (in memory, /dev/shm): the timeline
    still has them after the worker was killed with SIGKILL, and the files
    go when the cluster stops."""
    from phalanx._private.node import trace_dir
    with loopback_nodes([None]) as node:
        rings = trace_dir(node.session_dir)
        @phalanx.remote(max_retries=0)
        def who():
            return os.getpid()

        pid = phalanx.get(who.remote(), timeout=60)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not os.path.exists(f"/proc/{pid}") or
                   open(f"/proc/{pid}/stat").read().split()[2] == "Z", timeout=10, what="the worker to die")
        events = phalanx.timeline()
        assert os.path.isfile(os.path.join(rings, f"{phalanx.get_node_id()[:12]}-{pid}.ring"))
    assert not os.path.exists(rings)  # (in memory, /dev/shm: they go with the cluster)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert f"worker {pid}" in names
    assert any(e["ph"] == "X" and e["name"].endswith("who") for e in events), [e for e in events if e["ph"] == "X"]


@phalanx.remote(resources={"b": 0.01})
def _slow_there(seconds):
    time.sleep(seconds)
    return 1


def test_work_still_running_is_in_the_timeline_in_flight():
    """A task still running when the timeline is collected has no record in
    any ring yet (one is written as it ends): its node's raylet makes one,
    flagged in flight, ending at the collection. Each node's counters come
    with its rings, and the dashboard counts the task as running."""
    from phalanx._private import timeline as tl
    with loopback_nodes([None, {"b": 1}]):
        b_node = next(n["node_id"] for n in phalanx.nodes() if "b" in n["resources_total"])
        ref = _slow_there.remote(3.0)
        wait_until(lambda: sum(n["tasks_running"] for n in phalanx.nodes()) >= 1, timeout=30,
                   what="the task to run")
        time.sleep(0.5)
        nodes = tl.collect(60)
        events = tl.chrome_trace(nodes)["traceEvents"]
        from phalanx.dashboard import data
        by_name = {t["name"].rsplit(".", 1)[-1]: t for t in data.snapshot()["tasks"]}
        assert phalanx.get(ref, timeout=30) == 1
    # The dashboard counts it by name, running now (once: the node that sent it on does not count it).
    assert by_name["_slow_there"]["running"] == 1 and by_name["_slow_there"]["queued"] == 0, by_name
    counters = {n["node_id"]: n["counters"] for n in nodes}
    assert set(counters) == {n["node_id"] for n in nodes} and len(counters) == 2
    assert counters[b_node]["tasks_running"] == 1, counters[b_node]
    rows = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    b_row = next(pid for pid, name in rows.items() if b_node[:12] in name)
    live = [e for e in events if e.get("cat") == "task on node" and e["ph"] == "b" and e["pid"] == b_row
            and e["name"].endswith("_slow_there (in flight)")]
    assert live and all(e["args"]["in_flight"] for e in live), [e for e in events if e.get("cat") == "task on node"]
    # Queued, then running up to the moment of collection (it had run for 0.5 s or more).
    ends = {e["name"]: e["ts"] for e in events if e.get("cat") == "task on node" and e["ph"] == "e" and e["pid"] == b_row}
    running = next(e for e in live if not e["name"].startswith("queued"))
    assert ends[running["name"]] - running["ts"] >= 400_000  # us
    # The worker's own run record is not there yet: it is written when the run ends.
    assert not any(e["ph"] == "X" and e["name"].endswith("_slow_there") for e in events)
