"""Ray's `ray.util` look-ups of the cluster: the named actors (`list_named_actors`) and this node's
address (`get_node_ip_address`, `get_node_instance_id`)."""
import os

from phalanx import _core
from phalanx._private import api, state
from phalanx._private.rpc_tables import primary

_ACTOR_NAMES = "actor_names"  # (the GCS hash: "namespace/name" -> actor id hex; gcs/gcs_client.h)


def list_named_actors(all_namespaces=False):
    """The names of the live named actors of this job's namespace; with all_namespaces=True, every one as
    {"name": ..., "namespace": ...} (Ray's shapes)."""
    api.ensure_initialized()
    host, port = primary(state.info["gcs_address"])
    raw = _core.redis_command(host, port, ["HGETALL", _ACTOR_NAMES])
    alive = {a["actor_id"] for a in _core.gcs_actors(host, port) if a["state"] != "DEAD"}
    here = api.current_namespace()
    out = []
    for key, actor_id in zip(raw[::2], raw[1::2]):
        namespace, _, name = key.decode().rpartition("/")
        if actor_id.decode() not in alive:
            continue
        if all_namespaces:
            out.append({"name": name, "namespace": namespace})
        elif namespace == here:
            out.append(name)
    return out


def get_node_ip_address():
    """The address of the node this process runs on, as the cluster knows it."""
    if os.environ.get("PHALANX_NODE_IP") and state.mode == "worker":  # (the raylet's word: workers hold no token)
        return os.environ["PHALANX_NODE_IP"]
    api.ensure_initialized()
    node_id = state.info["node_id"].hex()
    return next((n["address"] for n in api.gcs_nodes() if n["node_id"] == node_id), "127.0.0.1")


def get_node_instance_id():
    """The cloud instance id of this node (Ray's): phalanx runs on the machines it is given, so ""."""
    return ""


__all__ = ["list_named_actors", "get_node_ip_address", "get_node_instance_id"]
