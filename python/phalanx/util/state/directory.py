"""Directory: who is who in a cluster, for the state API's rows: a node's address and whether it runs
on this machine, the job of an id (ids of tasks, actors and groups begin with the id of the client
that made them; a driver's record names its client), the actor a worker process holds, and a
worker's id. Built from GCS reads the caller made; immutable."""
import os

WORKER_ID_PID_HEX = 8  # a worker's id: its pid (8 hex digits) and its node's id


def worker_id(node_id, pid):
    """The id the state API gives the process `pid` on node `node_id` (hex): phalanx's processes have no
    cluster-wide worker id of their own that the state sources carry; this one is exact and stable."""
    return f"{int(pid) & 0xFFFFFFFF:08x}{node_id}"


def parse_worker_id(wid):
    """(node_id, pid) of a worker id, or None when `wid` is not one."""
    if not isinstance(wid, str) or len(wid) <= WORKER_ID_PID_HEX:
        return None
    try:
        return wid[WORKER_ID_PID_HEX:].lower(), int(wid[:WORKER_ID_PID_HEX], 16)
    except ValueError:
        return None


def pid_alive(pid):
    """Whether process `pid` runs on this machine (an exited one not yet reaped does not)."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return bool(pid) and f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError, ValueError):
        return False


class Directory:
    def __init__(self, nodes, drivers, actors=()):
        self.nodes = {n["node_id"]: n for n in nodes}
        self.drivers = drivers
        self._job_by_client = {d["client_id"]: d for d in drivers if d.get("client_id")}
        # (a live actor's worker first: a dead one's pid may have been given to another process since)
        ordered = sorted(actors, key=lambda a: a["state"] != "DEAD")
        self._actor_by_process = {(a["node_id"], a["pid"]): a for a in reversed(ordered) if a.get("pid")}
        self.actors = {a["actor_id"]: a for a in actors}

    def node_ip(self, node_id):
        n = self.nodes.get(node_id)
        return n["address"] if n else None

    def node_alive(self, node_id):
        n = self.nodes.get(node_id)
        return bool(n and n["alive"])

    def is_local(self, node_id):
        """Whether node `node_id` is a live raylet of this machine (its socket is here and its pid runs)."""
        n = self.nodes.get(node_id)
        return bool(n and n["alive"] and os.path.exists(n["socket_path"]) and pid_alive(n["pid"]))

    def driver_of(self, some_id):
        """The record of the driver that made `some_id` (a task, actor, group or client id, hex), or None."""
        return self._job_by_client.get((some_id or "")[:16])

    def job_of(self, some_id):
        d = self.driver_of(some_id)
        return d["job_id"] if d else None

    def actor_at(self, node_id, pid):
        """The actor whose worker is (or was) process `pid` on node `node_id`, or None."""
        return self._actor_by_process.get((node_id, pid))
