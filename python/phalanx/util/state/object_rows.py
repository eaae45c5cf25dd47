"""Rows of objects, from each live node's object table (the summary behind `phalanx memory`): one row
per object and per holder, as Ray lists one per object and per process that references it.

reference_type from the holder: a driver's or a worker's ref is LOCAL_REFERENCE (ACTOR_HANDLE for an
actor's handle), bytes mapped by a process PINNED_IN_MEMORY, a task that takes it USED_BY_PENDING_TASK,
a ref inside another object CAPTURED_IN_OBJECT; the lineage of a finished task, another node's borrow
and the node's own use (copies, gets) are UNKNOWN_STATUS. pid and type are the holding process's (None
where the holder is a task, a node or the raylet). task_status is FINISHED once the value exists,
FAILED when it is lost, NIL while pending (the creating task's state is in list_tasks). call_site is
"disabled" (phalanx records no call sites: Ray's value without RAY_record_ref_creation_sites).
object_size is in bytes, -1 while unknown. An object with no holder is listed once, UNKNOWN_STATUS."""

_REFERENCE = {"driver": "LOCAL_REFERENCE", "worker": "LOCAL_REFERENCE", "mapped": "PINNED_IN_MEMORY",
              "task argument": "USED_BY_PENDING_TASK", "inside object": "CAPTURED_IN_OBJECT"}
_PROCESS_KINDS = ("driver", "worker", "mapped")
_HAVE_VALUE = ("store", "spilled", "inline", "remote")


def _pid(who):
    """The pid in a holder's "PID 1234", or None."""
    word, _, number = who.partition(" ")
    return int(number) if word == "PID" and number.isdigit() else None


def _task_status(where):
    if where in _HAVE_VALUE:
        return "FINISHED"
    return "FAILED" if where == "lost" else "NIL"


def rows(memory_nodes, directory):
    driver_pids = {d["pid"] for d in directory.drivers}
    out = []
    for n in memory_nodes:
        for o in n["list"]:
            if o["where"] == "pending" and not o["holders"]:
                continue
            base = {"object_id": o["object_id"], "object_size": o["size"] if o["size"] > 0 else -1,
                    "task_status": _task_status(o["where"]), "call_site": "disabled", "ip": n["address"]}
            handle = o["object_id"][:32] in directory.actors and o["object_id"][32:] == "01000000"
            for kind, who, _ in o["holders"] or [("other", "", 1)]:
                pid = _pid(who) if kind in _PROCESS_KINDS else None
                ref = _REFERENCE.get(kind, "UNKNOWN_STATUS")
                if handle and ref == "LOCAL_REFERENCE":
                    ref = "ACTOR_HANDLE"
                if kind == "driver" or (kind == "mapped" and pid in driver_pids):
                    wtype = "DRIVER"
                else:
                    wtype = "WORKER" if pid is not None else None
                out.append(dict(base, reference_type=ref, type=wtype, pid=pid))
    return out


def truncated(memory_nodes):
    """(objects at the nodes, objects read): fewer are read when a node holds more than it was asked for."""
    total = sum(n["objects"] for n in memory_nodes)
    read = sum(len(n["list"]) for n in memory_nodes)
    return max(total, read), read
