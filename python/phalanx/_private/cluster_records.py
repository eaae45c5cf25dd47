"""What this user's `phalanx start` recorded on this machine, and the
cluster settings a process takes on from it: the head's address, each
started node's record (its session folder, processes), and each cluster's
token and TLS setting (kept in its session folder). The CLI (scripts.py)
writes them; phalanx.init(address=...) reads them. Under /tmp/phalanx/cli-UID
(PHALANX_TMPDIR), readable by this user only."""
import glob
import json
import os
import time

from phalanx._private.node import _shared_root, private_dir, read_session_tls, read_session_token, save_cluster_env


def root():
    return os.environ.get("PHALANX_TMPDIR", "/tmp/phalanx")


def cli_dir():
    return os.path.join(root(), f"cli-{os.getuid()}")


def head_file():
    return os.path.join(cli_dir(), "head_address")


def current_head_address():
    """The address of the cluster this machine's `phalanx start --head` made, if any."""
    try:
        with open(head_file()) as f:
            return f.read().strip() or None
    except OSError:
        return None


def records():
    """(path, record) of each node this user started here, oldest first."""
    out = []
    for path in sorted(glob.glob(os.path.join(cli_dir(), "started-*.json"))):
        try:
            with open(path) as f:
                out.append((path, json.load(f)))
        except (OSError, ValueError):
            continue
    return out


def _sessions_of(address):
    """Session folders of this user's `phalanx start` records for the GCS at `address`, newest first."""
    return [rec.get("session_dir", "") for _, rec in reversed(records()) if rec.get("redis_address") == address]


def token_for(address):
    """The token of the cluster whose GCS is at `address`: PHALANX_CLUSTER_TOKEN,
    else the one this user's `phalanx start` kept in its session folder; None if neither."""
    if os.environ.get("PHALANX_CLUSTER_TOKEN"):
        return os.environ["PHALANX_CLUSTER_TOKEN"]
    return next(filter(None, map(read_session_token, _sessions_of(address))), None)


def tls_for(address):
    """Whether the cluster whose GCS is at `address` runs with TLS: PHALANX_TLS=1,
    else what this user's `phalanx start` of it marked in its session folder."""
    return os.environ.get("PHALANX_TLS") == "1" or any(map(read_session_tls, _sessions_of(address)))


def use_cluster(address):
    """Sets PHALANX_CLUSTER_TOKEN and PHALANX_TLS in this process's environment
    for the cluster at `address` (token_for, tls_for); returns what they were."""
    before = save_cluster_env()
    token = token_for(address)
    if token:
        os.environ["PHALANX_CLUSTER_TOKEN"] = token
    if tls_for(address):
        os.environ["PHALANX_TLS"] = "1"
    return before


def record(node, role):
    """Records a node this command started (`phalanx stop` ends its processes); the record's path."""
    _shared_root(root())
    private_dir(cli_dir())
    rec = {"role": role, "session_dir": node.session_dir, "redis_address": node.redis_address,
           "raylet_socket": node.raylet_socket,
           "procs": [{"name": n, "pid": p.pid} for n, p in node.procs], "time": time.time()}
    path = os.path.join(cli_dir(), f"started-{os.getpid()}-{int(time.time() * 1000)}.json")
    with open(path, "w") as f:
        json.dump(rec, f)
    return path
