"""What the dashboard shows (docs/observability.md), read from the
runtime's own counters: the GCS's node and actor tables, each raylet's
counters (GET_STATS, gathered with the timeline), each node's objects
(`phalanx memory`) and the timeline's event rings (tasks, copies, collective
steps), with what is still running (the raylets' in-flight records). One snapshot is
one JSON document; the page asks for one every two seconds."""
import time

from phalanx import _core
from phalanx._private import memory, stuck
from phalanx._private import timeline as tl


def _gcs_tables():
    host, port = stuck._gcs()
    return _core.gcs_nodes(host, port, 5.0), _core.gcs_actors(host, port, 5.0)


def _by_name(name):
    return {"name": name, "finished": 0, "failed": 0, "seconds": 0.0, "running": 0, "queued": 0}


def _short(name):
    return name.rsplit(".", 1)[-1] if name else "?"


def snapshot(window_s=300.0, timeline_s=60.0, max_objects=50):
    """The cluster now: nodes, actors, tasks by name and state, objects,
    collectives and copies of the last `window_s` seconds, link throughput
    between nodes over that window, and the timeline's spans of the last
    `timeline_s` seconds."""
    now = time.time()
    nodes, actors = _gcs_tables()
    rings = tl.collect(window_s)
    # Counters: each node's, and their sum over the nodes that answered.
    node_stats = {n["node_id"][:12]: n["counters"] for n in rings if n["counters"] and not n["error"]}
    stats = {}
    for c in node_stats.values():
        for k, v in c.items():
            stats[k] = stats.get(k, 0) + v
    index = {n["node_id"]: i for i, n in enumerate(rings)}
    workers = tl.actor_labels(actors)
    tasks, spans, copies, steps = {}, [], [], []
    for n in rings:
        shift = n["offset_ns"]
        for ring in n["rings"]:
            for r in ring["records"]:
                kind = int(r["kind"])
                ts = (int(r["ts"]) + shift) / 1e9
                dur = int(r["dur"]) / 1e9
                name = r["name"].decode(errors="replace")
                failed = bool(r["flags"] & tl.FAILED)
                live = bool(r["flags"] & tl.IN_FLIGHT)
                if kind == tl.EXEC:  # every run, direct actor calls included: by name
                    t = tasks.setdefault(name, _by_name(name))
                    t["failed" if failed else "finished"] += 1
                    t["seconds"] += dur
                elif kind == tl.TASK and live and not bytes(r["peer"]).strip(b"\0"):
                    # Held by this node now: running (handed to a worker) or queued. (One sent on
                    # to another node is counted there.)
                    tasks.setdefault(name, _by_name(name))["running" if r["a"] else "queued"] += 1
                if kind == tl.EXEC and ts + dur >= now - timeline_s:
                    row = f"worker {ring['pid']}"
                    if (n["node_id"], ring["pid"]) in workers:
                        row = f"{workers[(n['node_id'], ring['pid'])]} ({row})"
                    row = f"{n['node_id'][:12]} {row}"
                    spans.append({"node": n["node_id"][:12], "row": row,
                                  "name": _short(name), "start": ts, "end": ts + dur, "failed": failed})
                elif kind == tl.TRANSFER:
                    copies.append({"to": n["node_id"][:12], "from": bytes(r["peer"]).hex()[:12], "bytes": int(r["a"]),
                                   "bytes_here": int(r["b"]) if live else int(r["a"]), "in_flight": live,
                                   "start": ts, "end": ts + dur, "failed": failed,
                                   "object_id": bytes(r["id"]).hex()})
                elif kind in (tl.REDUCE_STEP, tl.ALLREDUCE_SLICE):
                    steps.append({"node": n["node_id"][:12], "what": "reduce step" if kind == tl.REDUCE_STEP
                                  else "allreduce assembly", "name": name, "bytes": int(r["a"]), "start": ts,
                                  "end": ts + dur, "failed": failed, "in_flight": live,
                                  "object_id": bytes(r["id"]).hex()})
    # A broadcast: an object copied to two or more nodes; its copies are its hops.
    hops = {}
    for c in copies:
        hops.setdefault(c["object_id"], []).append(c)
    for obj, cs in hops.items():
        if len({c["to"] for c in cs}) < 2:
            continue
        start, end = min(c["start"] for c in cs), max(c["end"] for c in cs)
        route = ", ".join(f"{c['from'][:6]}->{c['to'][:6]}" for c in sorted(cs, key=lambda c: c["start"]))
        steps.append({"node": ", ".join(sorted({c["to"] for c in cs})), "what": "broadcast",
                      "name": f"object {obj[:12]} to {len(cs)} nodes: {route}", "bytes": cs[0]["bytes"],
                      "start": start, "end": end, "failed": any(c["failed"] for c in cs),
                      "in_flight": any(c["in_flight"] for c in cs), "object_id": obj})
    # Link throughput: bytes copied from node A to node B per 5 s bucket, spread over each copy's time.
    bucket_s, buckets = 5.0, int(window_s // 5.0)
    t0 = now - buckets * bucket_s
    links = {}
    for c in copies:
        if c["failed"] or not c["from"]:
            continue
        key = f"{c['from']} -> {c['to']}"
        series = links.setdefault(key, [0.0] * buckets)
        start, end = max(c["start"], t0), max(c["end"], t0)
        length = max(c["end"] - c["start"], 1e-9)
        moved = c["bytes_here"]  # (a copy in flight: the bytes so far)
        for b in range(int((start - t0) // bucket_s), min(buckets, int((end - t0) // bucket_s) + 1)):
            lo, hi = t0 + b * bucket_s, t0 + (b + 1) * bucket_s
            overlap = max(0.0, min(hi, end) - max(lo, start))
            if 0 <= b < buckets:
                series[b] += moved * overlap / length / bucket_s  # bytes/s in the bucket
    objects = []
    try:
        mem = memory.summary(max_objects)
    except Exception as e:  # noqa: BLE001 - the page says why
        mem, objects = [], [{"error": str(e)}]
    for n in mem:
        for o in n["list"]:
            if o["where"] == "pending" and not o["holders"]:
                continue
            objects.append({"node": n["node_id"][:12], **o})
    objects.sort(key=lambda o: -o.get("size", 0))
    live = [n for n in nodes if n["alive"]]
    return {
        "now": now,
        "nodes": [{"node_id": n["node_id"], "address": n["address"], "alive": n["alive"],
                   "resources_total": n["resources_total"], "resources_available": n["resources_available"],
                   "store_used": n["store_used"], "tasks_running": n["tasks_running"],
                   "tasks_queued": n["tasks_queued"], "workers": n["workers"],
                   "heartbeat_age_s": max(0.0, now - n["heartbeat_ms"] / 1000.0),
                   "row": index.get(n["node_id"], -1)} for n in sorted(nodes, key=lambda n: n["start_time_ms"])],
        "alive": len(live),
        "actors": [{"actor_id": a["actor_id"], "class_name": a["class_name"],
                    "name": a["name"].rpartition("/")[2],  # (registered as "namespace/name")
                    "namespace": a["name"].rpartition("/")[0], "state": a["state"],
                    "node_id": a.get("node_id", ""), "pid": a["pid"], "restarts": a["restarts"],
                    "death_cause": a["death_cause"]} for a in actors],
        "tasks": sorted(tasks.values(), key=lambda t: -(t["running"] + t["queued"] + t["finished"] + t["failed"])),
        "tasks_running": sum(n["tasks_running"] for n in live),
        "tasks_queued": sum(n["tasks_queued"] for n in live),
        "stats": stats,
        "node_stats": node_stats,
        "objects": objects[:max_objects],
        # In flight first, then the newest.
        "collectives": sorted(steps, key=lambda s: (not s["in_flight"], -s["start"]))[:50],
        "copies": sorted(copies, key=lambda c: (not c["in_flight"], -c["start"]))[:50],
        "links": {"bucket_s": bucket_s, "start": t0, "series": links},
        "timeline": {"start": now - timeline_s, "end": now, "spans": spans[-5000:]},
        "window_s": window_s,
    }
