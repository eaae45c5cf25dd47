"""The cluster file of `phalanx up/down/exec`: Ray's on-premises format where it fits (docs/cluster.md).

    cluster_name: demo
    provider: {type: local, head_ip: 10.0.0.1, worker_ips: [10.0.0.2, 10.0.0.3]}
    auth: {ssh_user: me, ssh_private_key: ~/.ssh/id_ed25519}
    python: /opt/venv/bin/python        # on every host: a Python with phalanx installed, or with
    wheel: dist/phalanx-....whl         #   a wheel (or a folder of wheels) `up` installs into a venv of it
    head_start_options: ["--num-cpus", "8"]
    worker_start_options: ["--resources", '{"sim": 8}']

Every field is checked when the file is read; an unknown one is named."""
import dataclasses
import ipaddress
import os
import re

_TOP = {"cluster_name", "provider", "auth", "python", "wheel", "gcs_port", "head_start_options",
        "worker_start_options", "setup_commands", "state_dir"}
_PROVIDER = {"type", "head_ip", "worker_ips"}
_AUTH = {"ssh_user", "ssh_private_key", "ssh_port", "ssh_known_hosts"}
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ClusterConfigError(ValueError):
    """A cluster file that cannot be used: the message names the field."""


@dataclasses.dataclass
class ClusterConfig:
    cluster_name: str
    head_ip: str
    worker_ips: list
    ssh_user: str
    ssh_private_key: str
    ssh_port: int = 22
    ssh_known_hosts: str = None
    python: str = "python3"
    wheel: str = None  # here: a phalanx wheel, or a folder with it and its dependencies' wheels
    gcs_port: int = 6379
    head_start_options: list = dataclasses.field(default_factory=list)
    worker_start_options: list = dataclasses.field(default_factory=list)
    setup_commands: list = dataclasses.field(default_factory=list)
    state_dir: str = "~/.phalanx/clusters"  # on each host: its token and records (per cluster and host)

    @property
    def hosts(self):
        return [self.head_ip] + list(self.worker_ips)

    @property
    def address(self):
        return f"{self.head_ip}:{self.gcs_port}"


def load(path):
    """The ClusterConfig of the YAML file at `path`."""
    import yaml
    try:
        with open(path) as f:
            raw = yaml.safe_load(f)
    except OSError as e:
        raise ClusterConfigError(f"cannot read the cluster file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ClusterConfigError(f"{path} is not YAML: {e}") from None
    return parse(raw, path)


def _unknown(d, allowed, where, path):
    extra = sorted(set(d) - allowed)
    if extra:
        raise ClusterConfigError(f"{path}: unknown field {where}{extra[0]!r}; "
                                 f"known ones are {', '.join(sorted(allowed))}")


def _ip(v, field, path):
    try:
        return str(ipaddress.ip_address(v))
    except ValueError:
        if isinstance(v, str) and re.match(r"^[A-Za-z0-9.-]{1,253}$", v):
            return v  # a host name
        raise ClusterConfigError(f"{path}: {field} must be an IP address or host name, got {v!r}") from None


def _strings(v, field, path):
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ClusterConfigError(f"{path}: {field} must be a list of strings, got {v!r}")
    return list(v)


def parse(raw, path="cluster file"):
    if not isinstance(raw, dict):
        raise ClusterConfigError(f"{path}: expected a mapping of fields, got {type(raw).__name__}")
    _unknown(raw, _TOP, "", path)
    provider = raw.get("provider")
    if not isinstance(provider, dict):
        raise ClusterConfigError(f"{path}: provider is required: {{type: local, head_ip: IP, worker_ips: [IP, ...]}}")
    _unknown(provider, _PROVIDER, "provider.", path)
    if provider.get("type") != "local":
        raise ClusterConfigError(f"{path}: provider.type {provider.get('type')!r} is not supported; phalanx starts "
                                 "clusters on machines it can SSH to: type: local")
    if "head_ip" not in provider:
        raise ClusterConfigError(f"{path}: provider.head_ip is required")
    auth = raw.get("auth")
    if not isinstance(auth, dict) or "ssh_user" not in auth or "ssh_private_key" not in auth:
        raise ClusterConfigError(f"{path}: auth is required: {{ssh_user: USER, ssh_private_key: PATH}}")
    _unknown(auth, _AUTH, "auth.", path)
    name = raw.get("cluster_name", "default")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ClusterConfigError(f"{path}: cluster_name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}")
    key = os.path.expanduser(str(auth["ssh_private_key"]))
    if not os.path.isfile(key):
        raise ClusterConfigError(f"{path}: auth.ssh_private_key {key} is not a file here")
    ports = {}
    for field, default in (("ssh_port", 22), ("gcs_port", 6379)):
        v = (auth if field == "ssh_port" else raw).get(field, default)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 65536:
            raise ClusterConfigError(f"{path}: {field} must be a port number, got {v!r}")
        ports[field] = v
    workers = provider.get("worker_ips") or []
    if not isinstance(workers, list):
        raise ClusterConfigError(f"{path}: provider.worker_ips must be a list of addresses, got {workers!r}")
    head = _ip(provider["head_ip"], "provider.head_ip", path)
    worker_ips = [_ip(w, "provider.worker_ips", path) for w in workers]
    if head in worker_ips or len(set(worker_ips)) != len(worker_ips):
        raise ClusterConfigError(f"{path}: a host is named twice in provider (head_ip and worker_ips)")
    python = raw.get("python", "python3")
    if not isinstance(python, str) or not python:
        raise ClusterConfigError(f"{path}: python must be the path of a Python with phalanx on the hosts")
    wheel = raw.get("wheel")
    if wheel is not None:
        wheel = os.path.expanduser(str(wheel))
        if not (os.path.isfile(wheel) and wheel.endswith(".whl")) and not (
                os.path.isdir(wheel) and any(n.startswith("phalanx-") and n.endswith(".whl") for n in os.listdir(wheel))):
            raise ClusterConfigError(f"{path}: wheel {wheel} is neither a phalanx wheel nor a folder holding one")
    return ClusterConfig(
        wheel=wheel, cluster_name=name, head_ip=head, worker_ips=worker_ips, ssh_user=str(auth["ssh_user"]),
        ssh_private_key=key, ssh_port=ports["ssh_port"],
        ssh_known_hosts=os.path.expanduser(auth["ssh_known_hosts"]) if auth.get("ssh_known_hosts") else None,
        python=python, gcs_port=ports["gcs_port"],
        head_start_options=_strings(raw.get("head_start_options"), "head_start_options", path),
        worker_start_options=_strings(raw.get("worker_start_options"), "worker_start_options", path),
        setup_commands=_strings(raw.get("setup_commands"), "setup_commands", path),
        state_dir=str(raw.get("state_dir", "~/.phalanx/clusters")))
