"""Ray's `ray.cluster_utils.Cluster`: a cluster of several nodes on this machine, for tests and for trying
multi-node programs (raylets on loopback sharing one redis-server):

    from phalanx.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=2, resources={"sim": 1})
    cluster.wait_for_nodes()
    phalanx.init(address=cluster.address)        # or cluster.connect()
    ...
    cluster.remove_node(worker)                  # its tasks and actors fail over as on a lost machine
    cluster.shutdown()

A node's failure is noticed fast (heartbeats every 200 ms, dead after 1.5 s) unless `_system_config`
says otherwise. Removing the node this process's driver is connected to is refused (Ray's ValueError),
since the driver would lose its raylet."""
import atexit
import json
import signal
import subprocess
import time

from phalanx._private import api, state
from phalanx._private import labels as _labels
from phalanx._private.node import NodeProcesses, new_session_dir
from phalanx._private.rpc_tables import all_nodes
from phalanx.exceptions import GetTimeoutError

# Ray's defaults for Cluster.add_node (python/ray/cluster_utils.py), less what phalanx does not have.
_NODE_DEFAULTS = {"num_cpus": 1, "num_gpus": 0, "object_store_memory": 150 * 1024 * 1024}
_FAST_FAILURE = {"heartbeat_ms": 200, "node_dead_after_ms": 1500}
_NODE_ARGS = {"num_cpus", "num_gpus", "resources", "object_store_memory", "labels", "_system_config", "env_vars",
              "memory", "node_name", "include_dashboard", "enable_object_reconstruction"}


class ClusterNode:
    """One node of a Cluster: its raylet process, socket and (once registered) its id."""

    def __init__(self, process, socket_path, is_head):
        self._process = process
        self.raylet_socket_name = socket_path
        self.plasma_store_socket_name = socket_path  # (Ray's name; phalanx's store is reached through it)
        self.is_head = is_head
        self.node_id = None  # hex, once the GCS has the node
        self.address = "127.0.0.1"
        self.node_ip_address = self.address
        self.metrics_export_port = None  # (the node's Prometheus endpoint, once the GCS has the node)
        self.address_info = {"node_ip_address": self.address, "raylet_socket_name": socket_path,
                              "metrics_export_port": None}

    @property
    def unique_id(self):
        return self.node_id

    def all_processes_alive(self):
        return self._process.poll() is None

    remaining_processes_alive = all_processes_alive
    any_processes_alive = all_processes_alive  # (a node here is one process: its raylet)

    def kill_raylet(self, allow_graceful=False):
        """Ends the raylet (SIGTERM then SIGKILL after 5 s if graceful, else SIGKILL at once)."""
        if self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM if allow_graceful else signal.SIGKILL)
        try:
            self._process.wait(5.0)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def __repr__(self):
        return f"ClusterNode({'head' if self.is_head else 'worker'}, {self.node_id or self.raylet_socket_name})"


class Cluster:
    """Ray's Cluster (ray.cluster_utils.Cluster): `initialize_head` starts the head node at once (with
    `head_node_args`), `connect` connects this process as its driver, `shutdown_at_exit` stops everything
    when the process exits."""

    def __init__(self, initialize_head=False, connect=False, head_node_args=None, shutdown_at_exit=True):
        if connect and not initialize_head:
            raise ValueError("Cluster(connect=True) needs initialize_head=True: there is no node to connect to")
        self._procs = NodeProcesses(new_session_dir())
        self._redis = self._procs.start_redis()
        self.head_node = None
        self.worker_nodes = set()
        self._connected = False
        self._shut = False
        if shutdown_at_exit:
            atexit.register(self.shutdown)
        if initialize_head:
            self.add_node(**(head_node_args or {}))
            if connect:
                self.connect()

    @property
    def address(self):
        """The cluster's GCS address, for phalanx.init(address=...)."""
        return self._redis

    gcs_address = address

    @property
    def session_dir(self):
        return self._procs.session_dir

    def add_node(self, wait=True, **node_args):
        """Starts a node (the first is the head): num_cpus (default 1), num_gpus, resources, object_store_memory,
        memory (bytes: the node's "memory" resource), labels, node_name (ray.nodes()' NodeName; default: its
        address), _system_config (raylet settings, e.g. {"heartbeat_ms": 100}). include_dashboard is taken and
        has no effect (a Cluster's nodes run no dashboard; `phalanx dashboard` serves one), and so is
        enable_object_reconstruction (lineage reconstruction is always on: docs/fault-tolerance.md). Returns its
        ClusterNode; with `wait`, once the GCS has it."""
        unknown = set(node_args) - _NODE_ARGS
        if unknown:
            raise ValueError(f"Cluster.add_node(): unknown argument(s) {sorted(unknown)}; "
                             f"known: {sorted(_NODE_ARGS | {'wait'})}")
        if self._shut:
            raise RuntimeError("this Cluster was shut down")
        args = dict(_NODE_DEFAULTS, **{k: v for k, v in node_args.items() if v is not None})
        extra = []
        for k, v in dict(_FAST_FAILURE, **(args.get("_system_config") or {})).items():
            extra += [f"--{k.replace('_', '-')}", str(v)]
        if args.get("num_gpus"):
            extra += ["--num-gpus", str(int(args["num_gpus"]))]
        if args.get("resources"):
            extra += ["--resources", json.dumps(args["resources"])]
        if args.get("labels"):
            extra += ["--labels", _labels.raylet_flag(_labels.check_node_labels(args["labels"]))]
        if args.get("memory"):
            extra += ["--memory", str(int(args["memory"]))]
        if args.get("node_name"):
            extra += ["--node-name", str(args["node_name"])]
        before = {n["node_id"] for n in all_nodes(self._redis)}
        sock = self._procs.start_raylet(self._redis, args["num_cpus"], args["object_store_memory"],
                                        extra_args=extra)
        process = next(p for name, p in reversed(self._procs.procs) if name == "raylet")
        node = ClusterNode(process, sock, is_head=self.head_node is None)
        if node.is_head:
            self.head_node = node
            api._local_cluster_address = self._redis  # (init() with no address joins it, as Ray's)
        else:
            self.worker_nodes.add(node)
        if wait:
            self._await_registration(node, before)
        return node

    def _await_registration(self, node, before, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in all_nodes(self._redis):
                if n["node_id"] not in before and n["socket_path"] == node.raylet_socket_name and n["alive"]:
                    node.node_id = n["node_id"]
                    node.metrics_export_port = n["metrics_export_port"]
                    node.address_info["metrics_export_port"] = n["metrics_export_port"]
                    node.address_info["node_id"] = n["node_id"]
                    return
            if not node.all_processes_alive():
                raise RuntimeError(f"the node's raylet exited at start (logs in {self.session_dir}/logs)")
            time.sleep(0.02)
        raise GetTimeoutError(f"the node did not register with the GCS within {timeout} s")

    def remove_node(self, node, allow_graceful=True):
        """Ends `node`'s raylet (and with it its workers, tasks, actors and objects). Refused for the node
        this process's driver is connected to."""
        if state.mode == "driver" and state.info.get("node_id") is not None and node.node_id == \
                state.info["node_id"].hex():
            raise ValueError("Removing a node that is connected to this Ray client is not allowed because it "
                             "will break the driver (phalanx: connect the driver to another node, or "
                             "shut it down first)")
        if node is not self.head_node and node not in self.worker_nodes:
            raise ValueError(f"{node!r} is not a node of this cluster")
        node.kill_raylet(allow_graceful=allow_graceful)
        self._procs.procs = [(n, p) for n, p in self._procs.procs if p is not node._process]
        if node is self.head_node:
            self.head_node = None
        else:
            self.worker_nodes.discard(node)

    def list_all_nodes(self):
        """The nodes of this cluster now: the head (if any) first."""
        return ([self.head_node] if self.head_node else []) + sorted(self.worker_nodes, key=id)

    def remaining_processes_alive(self):
        """Whether every node's processes (and the GCS's redis-server) are still running; a node removed with
        remove_node is no longer counted (Ray's)."""
        gcs = [proc for name, proc in self._procs.procs if name == "redis-server"]
        return all(p.poll() is None for p in gcs) and all(n.remaining_processes_alive() for n in self.list_all_nodes())

    def wait_for_nodes(self, timeout=30):
        """Until the GCS sees exactly this cluster's nodes alive (removed ones declared dead)."""
        want = {n.node_id for n in self.list_all_nodes()}
        deadline = time.monotonic() + timeout
        while True:
            alive = {n["node_id"] for n in all_nodes(self._redis) if n["alive"]}
            if alive == want:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"Timed out while waiting for nodes to join: {len(alive & want)} of "
                                   f"{len(want)} alive, {len(alive - want)} others not yet declared dead")
            time.sleep(0.05)

    def connect(self, namespace=None):
        """Connects this process to the cluster as its driver, through the head node."""
        api.init(address=self.address, namespace=namespace)
        self._connected = True
        return state.info

    def shutdown(self):
        """Disconnects this process if it is the cluster's driver and stops every node and the GCS."""
        if self._shut:
            return
        self._shut = True
        if api._local_cluster_address == self._redis:
            api._local_cluster_address = None
        if state.mode == "driver" and state.info.get("gcs_address") == self.address:
            api.shutdown()
        self._procs.stop()
        self.head_node = None
        self.worker_nodes = set()


__all__ = ["Cluster", "ClusterNode"]
