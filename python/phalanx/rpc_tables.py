"""Reading the GCS tables from Python (the protobuf values are parsed in C++)."""
from phalanx import _core


def all_nodes(host, port, timeout=5.0):
    """Every node ever registered with the GCS at host:port, as dicts."""
    return _core.gcs_nodes(host, int(port), timeout)


def alive_nodes(host, port, timeout=5.0):
    return [n for n in all_nodes(host, port, timeout) if n["alive"]]
