"""`phalanx memory` (docs/observability.md): the objects of the cluster by
size, on which node each lives, and what keeps it there: a driver's or a
worker's reference, a process that maps its bytes, a task that takes it as
an argument, the lineage kept to rebuild a lost result, another node that
borrowed it, an object whose value holds its ref. The question Ray users
ask most when the store fills (Ray #50408), answered per node."""
from phalanx import _core
from phalanx._private import api

_KIND = {"driver": "ref held by driver", "worker": "ref held by worker", "mapped": "bytes mapped by",
         "task argument": "argument of task", "lineage": "kept by the lineage of task",
         "held for node": "held for node", "inside object": "ref inside object", "other": "in use by"}


def summary(max_objects=1000, timeout_s=30.0):
    """Every live node's objects, largest first (at most `max_objects` each):
    [{node_id, address, store_capacity, store_used, spilled_bytes, objects,
    error, list: [{object_id, size, where, refs, remote_node, holders:
    [(kind, who, count)]}]}]."""
    api.ensure_initialized()
    return _core.memory_summary(int(max_objects), True, int(timeout_s * 1000))


def _size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_summary(nodes, limit=20):
    """The summary as text: per node its store use, then its largest objects with their holders."""
    lines = []
    total = sum(o["size"] for n in nodes for o in n["list"] if o["where"] in ("store", "spilled", "inline"))
    lines.append(f"{sum(n['objects'] for n in nodes)} objects on {len(nodes)} nodes, {_size(total)} in all")
    for n in nodes:
        head = f"\nnode {n['node_id'][:12]} ({n['address']})"
        if n["error"] and not n["list"]:
            lines.append(f"{head}: no answer ({n['error']})")
            continue
        lines.append(f"{head}: store {_size(n['store_used'])} of {_size(n['store_capacity'])} used, "
                     f"{_size(n['spilled_bytes'])} spilled to disk, {n['objects']} objects")
        shown = [o for o in n["list"] if o["where"] != "pending" or o["holders"]][:limit]
        if not shown:
            lines.append("  (no objects)")
        for o in shown:
            where = o["where"] if o["where"] != "remote" else f"on node {o['remote_node'][:12]}"
            lines.append(f"  {o['object_id'][:24]}  {_size(o['size']):>10}  {where:<8}  refs {o['refs']}")
            for kind, who, count in o["holders"]:
                lines.append(f"      {_KIND.get(kind, kind)} {who}" + (f" (x{count})" if count > 1 else ""))
        if len(n["list"]) > len(shown):
            lines.append(f"  ... {n['objects'] - len(shown)} more")
    return "\n".join(lines)
