"""The cluster's timeline as a Chrome trace (docs/observability.md): the JSON
that chrome://tracing and Perfetto (ui.perfetto.dev) open.

Every process keeps its recent events in a ring (core/trace.h); this asks the
raylet the driver is connected to, which reads its node's rings and asks
every other live raylet for theirs, measuring each node's clock offset on
the way. Rows: one process row per node; in it, the raylet's tracks (each
task's time on the node, queued then running; each object copied to the
node, a copy of an object that went to several nodes named a broadcast
hop; each reduce step and allreduce assembly) and one row per worker thread
(the tasks and actor calls it ran). What is still running when the timeline
is collected (tasks, copies, collective steps) ends at that moment, marked
"(in flight)". Arrows go from the task that made an object to each copy of
it, and to each task that took it as an argument."""
import json

import numpy as np

from phalanx import _core
from phalanx._private import api, stuck

# core/trace.h's Record, 128 bytes.
RECORD = np.dtype([("seq", "<u8"), ("ts", "<u8"), ("dur", "<u8"), ("a", "<u8"), ("b", "<u8"), ("kind", "<u2"),
                   ("flags", "<u2"), ("tid", "<u4"), ("id", "V20"), ("peer", "V8"), ("name", "S52")])
assert RECORD.itemsize == 128

TASK, EXEC, TRANSFER, REDUCE_STEP, ALLREDUCE_SLICE, ARGUMENT = 1, 2, 3, 4, 5, 7  # (6: none)
FAILED, ACTOR_CALL, IN_FLIGHT = 1, 2, 4


def collect(since_s=600.0, timeout_s=30.0):
    """The raw rings of every live node: [{node_id, address, offset_ns,
    rtt_ns, error, counters, rings: [{pid, label, start_ns, written,
    capacity, records}]}] (records: a numpy array of RECORD), for events that ended in the last
    `since_s` seconds; the ring labelled "in flight" holds what was still
    running (flag IN_FLIGHT, its dur up to the collection). counters: the
    node's (as phalanx's _core.stats)."""
    import time
    api.ensure_initialized()
    since_ns = max(0, int((time.time() - since_s) * 1e9))
    nodes = _core.collect_trace(since_ns, True, int(timeout_s * 1000))
    for n in nodes:
        for r in n["rings"]:
            r["records"] = np.frombuffer(r["records"], dtype=RECORD)
    return nodes


def _us(ns):
    return ns / 1000.0


def actor_labels(actors):
    """{(node id, pid): "actor Class"} of the actors alive or restarting in
    `actors` (the GCS's actor table), to name their workers' rows."""
    return {(a["node_id"], int(a["pid"])): f"actor {a['class_name'].rsplit('.', 1)[-1]}"
            for a in actors if a.get("pid") and a.get("node_id") and a["state"] != "DEAD"}


def actors_by_worker():
    """actor_labels() of the GCS's actor table; {} when it cannot be read."""
    try:
        host, port = stuck._gcs()
        return actor_labels(_core.gcs_actors(host, port, 5.0))
    except Exception:  # noqa: BLE001 - rows keep their plain names
        return {}


def chrome_trace(nodes, actors=None):
    """The Chrome trace (a dict) of collected rings (collect()); `actors`
    (actors_by_worker()) names the rows of actors' workers."""
    actors = actors or {}
    events, producers, copies, runs, uses = [], {}, [], {}, []
    # An object copied to two or more nodes was broadcast: each copy is a hop.
    copied_to = {}
    for n in nodes:
        for ring in n["rings"]:
            for rid in ring["records"]["id"][ring["records"]["kind"] == TRANSFER]:
                copied_to.setdefault(bytes(rid), set()).add(n["node_id"])
    for index, n in enumerate(nodes, start=1):
        label = f"node {n['node_id'][:12]} ({n['address']})" if n["address"] else f"node {n['node_id'][:12]}"
        if n["error"]:
            label += f": no events ({n['error']})"
        events.append({"ph": "M", "name": "process_name", "pid": index, "args": {"name": label}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": index, "args": {"sort_index": index}})
        shift = n["offset_ns"]
        for ring in n["rings"]:
            recs = ring["records"]
            if ring["label"] == "raylet":
                rtid = ring["pid"]
                events.append({"ph": "M", "name": "thread_name", "pid": index, "tid": rtid,
                               "args": {"name": f"raylet {ring['pid']}"}})
                events.append({"ph": "M", "name": "thread_sort_index", "pid": index, "tid": rtid,
                               "args": {"sort_index": 0}})
            threads = set()
            for r in recs:
                kind = int(r["kind"])
                ts = int(r["ts"]) + shift
                dur = int(r["dur"])
                rid = bytes(r["id"])
                name = r["name"].decode(errors="replace") or "?"
                failed = bool(r["flags"] & FAILED)
                live = bool(r["flags"] & IN_FLIGHT)
                if live:
                    name += " (in flight)"
                if kind == EXEC:
                    tid = int(r["tid"])
                    if tid not in threads:
                        threads.add(tid)
                        tname = f"worker {ring['pid']}" + ("" if tid == ring["pid"] else f" thread {tid}")
                        actor = actors.get((n["node_id"], ring["pid"]))
                        if actor:
                            tname = f"{actor} ({tname})"
                        events.append({"ph": "M", "name": "thread_name", "pid": index, "tid": tid,
                                       "args": {"name": tname}})
                    args = {"task_id": rid[:16].hex()}
                    if failed:
                        args["failed"] = True
                    events.append({"ph": "X", "cat": "task", "name": name, "pid": index, "tid": tid,
                                   "ts": _us(ts), "dur": _us(dur), "args": args})
                    producers[rid[:16]] = (index, tid, ts + dur)
                    runs[rid[:16]] = (index, tid, ts)
                elif kind == ARGUMENT:  # a task took an object: an arrow from the object's task to it
                    uses.append((rid[:16], int(r["a"]).to_bytes(8, "little") + int(r["b"]).to_bytes(8, "little"),
                                 rid.hex()))
                elif kind == TASK:
                    tid_hex = rid[:16].hex()
                    run_at = int(r["a"]) + shift if r["a"] else ts + dur
                    common = {"cat": "task on node", "pid": index, "tid": ring["pid"], "id": tid_hex}
                    args = {"task_id": tid_hex, "worker_pid": int(r["b"])}
                    if live:
                        args["in_flight"] = True
                    if bytes(r["peer"]).strip(b"\0"):
                        args["sent_to_node"] = bytes(r["peer"]).hex()[:12]
                    if failed:
                        args["failed"] = True
                    first = f"queued: {name}"
                    if not r["a"] and "sent_to_node" in args:  # (the node that ran it has its own record)
                        first = f"sent to node {args['sent_to_node']}: {name}"
                    events.append({**common, "ph": "b", "name": first, "ts": _us(ts), "args": args})
                    events.append({**common, "ph": "e", "name": first, "ts": _us(run_at)})
                    if r["a"]:
                        events.append({**common, "ph": "b", "name": name, "ts": _us(run_at), "args": args})
                        events.append({**common, "ph": "e", "name": name, "ts": _us(ts + dur)})
                elif kind == TRANSFER:
                    obj = rid.hex()
                    size = int(r["a"])
                    moved = int(r["b"]) if live else size  # (in flight: b is the bytes here so far)
                    rate = moved / max(dur, 1) * 1e9
                    src = bytes(r["peer"]).hex()[:12]
                    args = {"object_id": obj, "bytes": size, "from_node": src, "MB_per_s": round(rate / 1e6, 1)}
                    args.update({"in_flight": True, "bytes_here": moved} if live else {"chunks": int(r["b"])})
                    if failed:
                        args["failed"] = True
                    hop = len(copied_to.get(rid, ())) > 1
                    common = {"cat": "transfer,broadcast" if hop else "transfer", "pid": index, "tid": ring["pid"],
                              "id": "copy-" + obj}
                    nm = f"{'broadcast hop: ' if hop else ''}{name} {obj[:12]} from {src}"
                    events.append({**common, "ph": "b", "name": nm, "ts": _us(ts), "args": args})
                    events.append({**common, "ph": "e", "name": nm, "ts": _us(ts + dur)})
                    copies.append((rid[:16], index, ring["pid"], ts, obj))
                elif kind in (REDUCE_STEP, ALLREDUCE_SLICE):
                    what = "reduce step" if kind == REDUCE_STEP else "allreduce assembly"
                    args = {"object_id": rid.hex(), "bytes": int(r["a"]),
                            ("inputs" if kind == REDUCE_STEP else "slices"): int(r["b"])}
                    if live:
                        args["in_flight"] = True
                    if failed:
                        args["failed"] = True
                    common = {"cat": "collective", "pid": index, "tid": ring["pid"], "id": f"{what}-{rid.hex()}"}
                    events.append({**common, "ph": "b", "name": f"{what}: {name}", "ts": _us(ts), "args": args})
                    events.append({**common, "ph": "e", "name": f"{what}: {name}", "ts": _us(ts + dur)})
    # Arrows: from the task that made an object to each copy of it.
    for flow, (task, index, tid, ts, obj) in enumerate(copies, start=1):
        src = producers.get(task)
        if src is None:
            continue
        events.append({"ph": "s", "cat": "object", "name": f"object {obj[:12]}", "id": flow, "pid": src[0],
                       "tid": src[1], "ts": _us(src[2] - 1000)})
        events.append({"ph": "f", "bp": "e", "cat": "object", "name": f"object {obj[:12]}", "id": flow,
                       "pid": index, "tid": tid, "ts": _us(ts)})
    # ... and from the task that made an object to each task that took it as an argument.
    flow = len(copies)
    for producer, consumer, obj in uses:
        src, dst = producers.get(producer), runs.get(consumer)
        if src is None or dst is None:
            continue
        flow += 1
        events.append({"ph": "s", "cat": "argument", "name": f"argument {obj[:12]}", "id": flow, "pid": src[0],
                       "tid": src[1], "ts": _us(src[2] - 1000)})
        events.append({"ph": "f", "bp": "e", "cat": "argument", "name": f"argument {obj[:12]}", "id": flow,
                       "pid": dst[0], "tid": dst[1], "ts": _us(dst[2] + 1000)})
    clocks = {n["node_id"][:12]: {"offset_ns": n["offset_ns"], "rtt_ns": n["rtt_ns"]} for n in nodes}
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "phalanx", "clock_offsets": clocks}}


def timeline(filename=None, since_s=600.0):
    """The cluster's timeline of the last `since_s` seconds as a Chrome trace:
    written to `filename` (JSON) when given, else returned as a list of
    events (as ray.timeline() does)."""
    trace = chrome_trace(collect(since_s), actors_by_worker())
    if filename is None:
        return trace["traceEvents"]
    with open(filename, "w") as f:
        json.dump(trace, f)
    return None
