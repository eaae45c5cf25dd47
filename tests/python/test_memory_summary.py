"""`phalanx memory` (docs/observability.md): every node's objects by size,
with what keeps each one: the driver's reference, the driver's mapping of
its bytes, a running task's argument, another node that borrowed the ref,
an object whose value holds the ref."""
import os
import time

import numpy as np

import phalanx
from phalanx._private import memory

from conftest import loopback_nodes, wait_until

MIB = 1 << 20


@phalanx.remote(resources={"b": 0.01})
def _made_there():
    return np.full(MIB, 2.0, dtype=np.float32)  # 4 MiB


@phalanx.remote
def _slow_sum(a, gate):
    """Runs until the test has looked (the file `gate` exists)."""
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return float(a.sum())


@phalanx.remote(num_cpus=0, resources={"b": 0.01})
class _Keeper:
    def keep(self, refs):
        self.refs = refs  # borrowed: the driver's node holds the object for this node
        return True


def _object(nodes, oid):
    for n in nodes:
        for o in n["list"]:
            if o["object_id"] == oid:
                return n, o
    raise AssertionError(f"object {oid} not in the summary")


def test_memory_names_each_objects_node_size_and_holders(tmp_path):
    with loopback_nodes([None, {"b": 1}]):
        head = phalanx.get_node_id()
        big = phalanx.put(np.ones(2 * MIB, dtype=np.float32))  # 8 MiB
        view = phalanx.get(big)  # mapped by the driver while `view` lives
        there = _made_there.remote()
        assert phalanx.get(there, timeout=60)[0] == 2.0
        keeper = _Keeper.remote()
        assert phalanx.get(keeper.keep.remote([big]), timeout=60)
        gate = tmp_path / "looked"
        here = phalanx.NodeAffinitySchedulingStrategy(head)  # (not the other node, even on a loaded machine)
        running = _slow_sum.options(scheduling_strategy=here).remote(big, str(gate))
        wait_until(lambda: sum(n["tasks_running"] for n in phalanx.nodes()) >= 1, timeout=30,
                   what="the task to run, with big as its argument")
        wrapper = phalanx.put([there])  # a value holding a ref

        nodes = memory.summary()
        assert {n["node_id"] for n in nodes} >= {head} and len(nodes) == 2
        node, o = _object(nodes, big.hex())
        assert node["node_id"] == head and o["where"] == "store" and o["size"] >= 8 * MIB
        kinds = {(k, w.split(" (")[0]) for k, w, _ in o["holders"]}
        me = f"PID {os.getpid()}"
        assert ("driver", me) in kinds and ("mapped", me) in kinds, o
        assert any(k == "task argument" and w.endswith("_slow_sum (running)") for k, w, _ in o["holders"]), o
        b_node = next(n["node_id"] for n in nodes if n["node_id"] != head)
        assert ("held for node", b_node[:12]) in kinds, o
        _, t = _object(nodes, there.hex())
        assert any(k == "inside object" for k, _, _ in t["holders"]), t
        # Largest first on each node.
        sizes = [x["size"] for x in node["list"]]
        assert sizes == sorted(sizes, reverse=True)

        text = memory.format_summary(nodes)
        assert f"node {head[:12]}" in text and f"node {b_node[:12]}" in text
        assert big.hex()[:24] in text and "8.0 MiB" in text
        assert f"ref held by driver PID {os.getpid()}" in text and "bytes mapped by" in text
        assert "argument of task" in text and "held for node" in text
        gate.touch()
        assert phalanx.get(running, timeout=60) == float(2 * MIB)
        del view, wrapper
