"""Reading the GCS tables from Python (the protobuf values are parsed in C++)."""
from phalanx import _core
from phalanx.exceptions import UnavailableError


def endpoints(address):
    """"HOST:PORT[,HOST:PORT...]" (a GCS primary and its replicas) as [(host, port)]."""
    out = []
    for item in address.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bad GCS address {item!r} in {address!r}; expected HOST:PORT[,HOST:PORT...]")
        out.append((host, int(port)))
    return out


def primary(address, timeout=5.0):
    """(host, port) of the GCS at `address`: the one given, or of a list the
    first that answers as the primary (Redis's ROLE says "master")."""
    eps = endpoints(address)
    if len(eps) == 1:
        return eps[0]
    errors = []
    for host, port in eps:
        try:
            role = _core.redis_command(host, port, ["ROLE"], timeout)
        except Exception as e:  # (unreachable: try the next)
            errors.append(str(e))
            continue
        if isinstance(role, list) and role and role[0] in (b"master", "master"):
            return host, port
        errors.append(f"{host}:{port} is a replica")
    raise UnavailableError(f"no primary redis-server (GCS) among {address}: " + "; ".join(errors))


def all_nodes(host, port=None, timeout=5.0):
    """Every node ever registered with the GCS at host:port (or at the
    address "HOST:PORT[,HOST:PORT...]" given as `host`), as dicts."""
    if port is None:
        host, port = primary(host, timeout)
    return _core.gcs_nodes(host, int(port), timeout)


def alive_nodes(host, port=None, timeout=5.0):
    return [n for n in all_nodes(host, port, timeout) if n["alive"]]
