"""`phalanx up|down|exec CLUSTER.yaml`: the command line of phalanx.cluster (docs/cluster.md)."""
import sys

from phalanx.cluster import config as cluster_config
from phalanx.cluster.launcher import ClusterLauncher, LaunchError
from phalanx.cluster.ssh import SshError


def add_parsers(sub):
    up = sub.add_parser("up", help="start a cluster on the hosts of CLUSTER.yaml over SSH (again: what is missing)")
    up.add_argument("cluster_file")
    up.add_argument("--register-timeout", type=float, default=60.0, help="seconds for the nodes to register")
    down = sub.add_parser("down", help="stop what `phalanx up` started on the hosts of CLUSTER.yaml")
    down.add_argument("cluster_file")
    ex = sub.add_parser("exec", help="run `-- CMD...` on the head of CLUSTER.yaml as a driver of the cluster")
    ex.add_argument("cluster_file")
    ex.add_argument("command", nargs="*", help="-- the command")


def run(a):
    try:
        c = cluster_config.load(a.cluster_file)
    except cluster_config.ClusterConfigError as e:
        print(f"phalanx {a.cmd}: {e}", file=sys.stderr)
        return 1
    if a.cmd == "up":
        try:
            ClusterLauncher(c, register_timeout_s=a.register_timeout).up()
        except LaunchError as e:
            print(f"phalanx up: {e}", file=sys.stderr)
            return 1
        return 0
    if a.cmd == "down":
        unreachable = ClusterLauncher(c).down()
        return 1 if unreachable else 0
    argv = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not argv:
        print("phalanx exec: give the command after --, e.g. `-- python script.py`", file=sys.stderr)
        return 1
    try:
        return ClusterLauncher(c).exec(argv)
    except SshError as e:
        print(f"phalanx exec: {e}", file=sys.stderr)
        return 1
