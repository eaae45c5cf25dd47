"""What the dashboard shows (docs/observability.md), read from the
runtime's own counters: the GCS's node and actor tables, each raylet's
counters (GET_STATS, gathered with the timeline), each node's objects
(`phalanx memory`) and the timeline's event rings (tasks, copies, collective
steps), with what is still running (the raylets' in-flight records). One snapshot is
one JSON document; the page asks for one every two seconds, and the server
keeps the rings' records between them (Rings), so each asks the nodes only
for what is new."""
import time

import numpy as np

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


MAX_SPANS = 5000  # the page's timeline draws at most this many runs (the newest)


class Rings:
    """Every node's ring records of the last `window_s` seconds, kept between
    calls so that each asks the raylets only for what ended since the last
    answer of each node (less `margin_s` and the largest clock offset between
    nodes, for records published late), deduplicated by each ring's seq. A page open for hours costs one
    window's read at its start, then a few seconds' worth every two seconds.
    The "in flight" ring is made anew by each answer and never kept."""

    def __init__(self, window_s=300.0, margin_s=2.0):
        self.window_s, self.margin_s = window_s, margin_s
        self._kept = {}  # (node id, pid, label, start_ns) -> records (numpy RECORD) of the window
        self._capacity = {}  # the same key -> the ring's capacity
        self._answered = {}  # node id -> time.time() of its last answer
        self.asked_s = None  # how far back the last collect asked
        self.received = 0  # the bytes of records its answer carried
        self._skew_s = 0.0  # the largest clock offset of a node in the last answer

    def collect(self, live_nodes, now=None):
        """tl.collect()'s list for the window, rings of what was kept filled in."""
        now = time.time() if now is None else now
        known = [self._answered.get(n) for n in live_nodes]
        since_s = self.window_s
        if known and None not in known:
            since_s = min(self.window_s, now - min(known) + self.margin_s + self._skew_s)
        self.asked_s = since_s
        nodes = tl.collect(since_s)
        self.received = sum(r["records"].nbytes for n in nodes for r in n["rings"])
        self._skew_s = max([abs(n["offset_ns"]) / 1e9 for n in nodes if not n["error"]], default=0.0)
        answered = set()
        for n in nodes:
            if n["error"] and not n["rings"]:
                continue  # (its kept rings stay; the next ask reaches back to its last answer)
            answered.add(n["node_id"])
            self._answered[n["node_id"]] = now
            cutoff = max(0, int((now - self.window_s) * 1e9) - n["offset_ns"])  # (this node's clock)
            seen = set()
            for ring in n["rings"]:
                if ring["label"] == "in flight":
                    continue
                key = (n["node_id"], ring["pid"], ring["label"], ring["start_ns"])
                seen.add(key)
                recs, old = ring["records"], self._kept.get(key)
                if old is not None and len(old):
                    # (By seq, not after the last: a record whose writer was slower than the next one's
                    # is published after it.)
                    new = recs[~np.isin(recs["seq"], old["seq"])]
                    recs = np.concatenate([old, new])
                    if len(new) and new["seq"][0] < old["seq"][-1]:
                        recs = recs[np.argsort(recs["seq"], kind="stable")]
                # What the ring itself would hold: the window, at most its capacity.
                if len(recs):
                    inside = recs["ts"] + recs["dur"] >= cutoff
                    if not inside.all():
                        recs = recs[inside]
                    recs = recs[-max(1, ring["capacity"]):]
                self._kept[key] = ring["records"] = recs
                self._capacity[key] = ring["capacity"]
            for key in [k for k in self._kept if k[0] == n["node_id"] and k not in seen]:
                del self._kept[key], self._capacity[key]  # (its file is gone)
        # Nodes gone from the cluster are forgotten; one that did not answer this time shows what was kept.
        alive = set(live_nodes)
        for key in [k for k in self._kept if k[0] not in alive]:
            del self._kept[key], self._capacity[key]
        for node in [k for k in self._answered if k not in alive]:
            del self._answered[node]
        for n in nodes:
            if n["node_id"] in answered or n["node_id"] not in alive:
                continue
            n["rings"] = [{"pid": k[1], "label": k[2], "start_ns": k[3], "written": 0,
                           "capacity": self._capacity[k], "records": v}
                          for k, v in self._kept.items() if k[0] == n["node_id"]]
        return nodes


def snapshot(window_s=300.0, timeline_s=60.0, max_objects=50, rings=None):
    """The cluster now: nodes, actors, tasks by name and state, objects,
    collectives and copies of the last `window_s` seconds, link throughput
    between nodes over that window, and the timeline's spans of the last
    `timeline_s` seconds. `rings` (a Rings of the same window_s): what the
    last snapshot read is kept there, and only what is new is asked for."""
    now = time.time()
    nodes, actors = _gcs_tables()
    if rings is None:
        rings = Rings(window_s)
    collected = rings.collect([n["node_id"] for n in nodes if n["alive"]], now)
    # Counters: each node's, and their sum over the nodes that answered.
    node_stats = {n["node_id"][:12]: n["counters"] for n in collected if n["counters"] and not n["error"]}
    stats = {}
    for c in node_stats.values():
        for k, v in c.items():
            stats[k] = stats.get(k, 0) + v
    index = {n["node_id"]: i for i, n in enumerate(collected)}
    workers = tl.actor_labels(actors)
    tasks, spans, copies, steps = {}, [], [], []
    recent_ns = int((now - timeline_s) * 1e9)
    for n in collected:
        shift = n["offset_ns"]
        for ring in n["rings"]:
            recs = ring["records"]
            if not len(recs):
                continue
            kind = recs["kind"]
            # Every run, direct actor calls included, by name (numpy: a ring holds up to 16,384).
            runs = recs[kind == tl.EXEC]
            if len(runs):
                names, which = np.unique(runs["name"], return_inverse=True)
                failed = (runs["flags"] & tl.FAILED) != 0
                counts = np.bincount(which, minlength=len(names))
                fails = np.bincount(which, weights=failed, minlength=len(names))
                seconds = np.bincount(which, weights=runs["dur"] / 1e9, minlength=len(names))
                for k, raw in enumerate(names):
                    name = raw.decode(errors="replace")
                    t = tasks.setdefault(name, _by_name(name))
                    t["failed"] += int(fails[k])
                    t["finished"] += int(counts[k] - fails[k])
                    t["seconds"] += float(seconds[k])
                ends = runs["ts"].astype(np.int64) + runs["dur"].astype(np.int64) + shift
                row = f"worker {ring['pid']}"
                if (n["node_id"], ring["pid"]) in workers:
                    row = f"{workers[(n['node_id'], ring['pid'])]} ({row})"
                row = f"{n['node_id'][:12]} {row}"
                recent = (ends >= recent_ns).nonzero()[0][-MAX_SPANS:]
                shorts = [_short(raw.decode(errors="replace")) for raw in names]
                starts = ((runs["ts"][recent].astype(np.int64) + shift) / 1e9).tolist()
                durs = (runs["dur"][recent] / 1e9).tolist()
                spans.extend({"node": n["node_id"][:12], "row": row, "name": shorts[w], "start": s, "end": s + d,
                              "failed": f}
                             for w, s, d, f in zip(which[recent].tolist(), starts, durs, failed[recent].tolist()))
            held = (kind == tl.TASK) & ((recs["flags"] & tl.IN_FLIGHT) != 0)
            for r in recs[held | (kind == tl.TRANSFER) | (kind == tl.REDUCE_STEP) | (kind == tl.ALLREDUCE_SLICE)]:
                what = int(r["kind"])
                ts = (int(r["ts"]) + shift) / 1e9
                dur = int(r["dur"]) / 1e9
                name = r["name"].decode(errors="replace")
                failed = bool(r["flags"] & tl.FAILED)
                live = bool(r["flags"] & tl.IN_FLIGHT)
                if what == tl.TASK:
                    if not bytes(r["peer"]).strip(b"\0"):
                        # Held by this node now: running (handed to a worker) or queued. (One sent on
                        # to another node is counted there.)
                        tasks.setdefault(name, _by_name(name))["running" if r["a"] else "queued"] += 1
                elif what == tl.TRANSFER:
                    copies.append({"to": n["node_id"][:12], "from": bytes(r["peer"]).hex()[:12], "bytes": int(r["a"]),
                                   "bytes_here": int(r["b"]) if live else int(r["a"]), "in_flight": live,
                                   "start": ts, "end": ts + dur, "failed": failed,
                                   "object_id": bytes(r["id"]).hex()})
                else:
                    steps.append({"node": n["node_id"][:12], "what": "reduce step" if what == tl.REDUCE_STEP
                                  else "allreduce assembly", "name": name, "bytes": int(r["a"]), "start": ts,
                                  "end": ts + dur, "failed": failed, "in_flight": live,
                                  "object_id": bytes(r["id"]).hex()})
    spans = sorted(spans, key=lambda x: x["end"])[-MAX_SPANS:]
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
        "timeline": {"start": now - timeline_s, "end": now, "spans": spans},
        "window_s": window_s,
    }
