"""`phalanx up / exec / down CLUSTER.yaml` for real: two hosts are network namespaces on this machine,
each running its own sshd (Debian's openssh-server) that accepts a key this test makes; the launcher
runs in the head's namespace and reaches both over SSH. The cluster starts, runs a driver's task on the
worker, keeps its token off command lines and in 0600 files, starts again only what is missing, stops
whole; an unreachable host, a refused key, a missing Python and an unknown field are each named."""
import os
import pwd
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import veth_namespaces

HEAD, WORKER = "10.79.0.1", "10.79.0.2"
SSHD = "/usr/sbin/sshd"


def _keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True, timeout=30)
    return path


@pytest.fixture
def hosts(tmp_path):
    if shutil.which("ssh") is None or not os.path.exists(SSHD):
        pytest.skip("needs OpenSSH's client and server (scripts/setup.sh installs openssh-server)")
    with veth_namespaces(HEAD, WORKER, prefix="phs") as (ns_head, ns_worker):
        key = _keygen(str(tmp_path / "id"))
        host_key = _keygen(str(tmp_path / "host_key"))
        shutil.copy(key + ".pub", tmp_path / "authorized_keys")
        os.makedirs("/run/sshd", exist_ok=True)  # (sshd's privilege separation folder)
        sshds = []
        try:
            for ns, ip in ((ns_head, HEAD), (ns_worker, WORKER)):
                conf = tmp_path / f"sshd-{ip}.conf"
                conf.write_text(f"Port 22\nListenAddress {ip}\nHostKey {host_key}\nPidFile {tmp_path}/sshd-{ip}.pid\n"
                                f"AuthorizedKeysFile {tmp_path}/authorized_keys\nStrictModes no\nUsePAM no\n"
                                "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                                "PermitRootLogin prohibit-password\nPubkeyAuthentication yes\n")
                log = open(tmp_path / f"sshd-{ip}.log", "ab")
                sshds.append(subprocess.Popen(["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(conf)],
                                              stdout=log, stderr=subprocess.STDOUT))
            yield {"ns": (ns_head, ns_worker), "key": key, "dir": tmp_path}
        finally:
            for ns in (ns_head, ns_worker):  # whatever the cluster left running in the namespaces
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            for p in sshds:
                p.kill()
                p.wait()


def _cluster_file(h, name="test", workers=(WORKER,), key=None, python=sys.executable, extra=""):
    """A cluster file for the two namespaces (the head, WORKER and any others given)."""
    path = h["dir"] / f"{name}.yaml"
    path.write_text(f"cluster_name: {name}\n"
                    f"provider: {{type: local, head_ip: {HEAD}, worker_ips: [{', '.join(workers)}]}}\n"
                    f"auth: {{ssh_user: {pwd.getpwuid(os.getuid()).pw_name}, ssh_private_key: {key or h['key']}, "
                    f"ssh_known_hosts: {h['dir']}/known_hosts}}\n"
                    f"python: {python}\n"
                    f"state_dir: {h['dir']}/state\n"
                    "head_start_options: ['--num-cpus', '1']\n"
                    "worker_start_options: ['--num-cpus', '1', '--resources', '{\"far\": 1}']\n" + extra)
    return str(path)


def _phalanx(h, *args, timeout=180):
    """`phalanx ARGS` run in the head's namespace (where the launcher runs)."""
    return subprocess.run(["ip", "netns", "exec", h["ns"][0], sys.executable, "-m", "phalanx.scripts", *args],
                          capture_output=True, text=True, timeout=timeout)


DRIVER = ("import phalanx, socket\n"
          "phalanx.init(address='auto')\n"
          "@phalanx.remote(resources={'far': 1})\n"
          "def where():\n"  # (this process's address toward the head: the namespace it runs in)
          "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
          f"    s.connect(('{HEAD}', 9))\n"
          "    return s.getsockname()[0]\n"
          "print('ran in', phalanx.get(where.remote(), timeout=60))\n")


def test_up_exec_again_and_down_on_two_ssh_hosts(hosts):
    h = hosts
    # (a setup command that reads its standard input: it gets none, and the token on SSH's stays whole)
    cluster = _cluster_file(h, extra="setup_commands: ['cat > /dev/null', 'echo ready']\n")
    up = _phalanx(h, "up", cluster)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"is up: GCS at {HEAD}:6379" in up.stdout
    assert "2 alive" in up.stdout, up.stdout  # (the status table)
    # The token: in a 0600 file on each host, in no process's command line.
    state = h["dir"] / "state"
    tokens = {ip: (state / f"test-{ip}" / "token") for ip in (HEAD, WORKER)}
    for path in tokens.values():
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        assert oct(os.stat(path.parent).st_mode & 0o777) == "0o700"
    token = tokens[HEAD].read_text().strip()
    assert tokens[WORKER].read_text().strip() == token and len(token) == 64
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                assert token not in open(f"/proc/{pid}/cmdline").read(), f"pid {pid} shows the token"
            except (FileNotFoundError, ProcessLookupError):
                pass
    # A driver on the head reaches the worker's resource.
    ex = _phalanx(h, "exec", cluster, "--", "python", "-c", DRIVER)
    assert ex.returncode == 0, ex.stdout + ex.stderr
    assert f"ran in {WORKER}" in ex.stdout
    # Again: nothing restarted.
    again = _phalanx(h, "up", cluster)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{HEAD}: head already running" in again.stdout and f"{WORKER}: node already running" in again.stdout
    # The worker's node stopped: the next `up` starts it alone.
    stop = subprocess.run(["ip", "netns", "exec", h["ns"][1], sys.executable, "-m", "phalanx.scripts", "stop"],
                          env=dict(os.environ, PHALANX_TMPDIR=str(state / f"test-{WORKER}" / "tmp")), capture_output=True,
                          text=True, timeout=60)
    assert "stopped" in stop.stdout, stop.stdout + stop.stderr
    third = _phalanx(h, "up", cluster)
    assert third.returncode == 0, third.stdout + third.stderr
    assert f"{HEAD}: head already running" in third.stdout and f"{WORKER}: started" in third.stdout
    down = _phalanx(h, "down", cluster)
    assert down.returncode == 0, down.stdout + down.stderr
    for ns in h["ns"]:
        left = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        names = {open(f"/proc/{p}/comm").read().strip() for p in left if os.path.exists(f"/proc/{p}/comm")}
        assert names <= {"sshd"}, names  # raylets, redis-server, the job agent: all gone


def test_hosts_that_cannot_start_are_named_and_the_others_can_be_stopped(hosts):
    h = hosts
    unreachable = "10.80.0.9"  # (no route from the head's namespace)
    up = _phalanx(h, "up", _cluster_file(h, name="partial", workers=(WORKER, unreachable)))
    assert up.returncode == 1
    assert f"{unreachable}: unreachable" in up.stderr, up.stderr
    assert f"started: {HEAD}, {WORKER} (`phalanx down` stops them)" in up.stderr, up.stderr
    down = _phalanx(h, "down", _cluster_file(h, name="partial", workers=(WORKER, unreachable)))
    assert f"{HEAD}: phalanx: stopped" in down.stdout and f"{WORKER}: phalanx: stopped" in down.stdout, down.stdout
    assert down.returncode == 1  # (the unreachable host could not be told)

    wrong = _keygen(str(h["dir"] / "not_authorized"))
    up = _phalanx(h, "up", _cluster_file(h, name="wrongkey", key=wrong))
    assert up.returncode == 1 and f"{HEAD}: the host refused the key" in up.stderr, up.stderr
    assert "nothing was started" in up.stderr

    up = _phalanx(h, "up", _cluster_file(h, name="nopython", python="/no/such/python3"))
    assert up.returncode == 1 and f"{HEAD}: no Python at /no/such/python3" in up.stderr, up.stderr

    bad = "setup_commands: ['true', 'echo no disk >&2; exit 3']\n"
    up = _phalanx(h, "up", _cluster_file(h, name="badsetup", extra=bad))
    assert up.returncode == 1 and f"{HEAD}: setup command 'echo no disk >&2; exit 3' exited with 3: no disk" in \
        up.stderr, up.stderr

    up = _phalanx(h, "up", _cluster_file(h, name="unknown", extra="max_workers: 4\n"))
    assert up.returncode == 1 and "unknown field 'max_workers'" in up.stderr, up.stderr


def test_up_installs_phalanx_from_a_wheel_on_hosts_without_it(hosts, phalanx_wheel, tmp_path):
    h = hosts
    base = shutil.which("python3", path="/usr/bin:/bin")
    if base is None or subprocess.run([base, "-c", "import phalanx"], capture_output=True).returncode == 0:
        pytest.skip("needs a system python3 without phalanx")
    # The wheel and its dependencies' wheels, gathered here (the hosts have no package index).
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    shutil.copy(phalanx_wheel[0], wheels)
    p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--dest", str(wheels),
                        phalanx_wheel[0]], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    cluster = _cluster_file(h, name="fromwheel", python=base, extra=f"wheel: {wheels}\n")
    up = _phalanx(h, "up", cluster, timeout=900)
    assert up.returncode == 0, up.stdout + up.stderr
    ex = _phalanx(h, "exec", cluster, "--", "python", "-c", DRIVER)
    assert ex.returncode == 0 and f"ran in {WORKER}" in ex.stdout, ex.stdout + ex.stderr
    venvs = os.listdir(h["dir"] / "state" / "venvs")
    assert len(venvs) == 1  # (made once; the second host found it: they share this machine's disk)
    again = _phalanx(h, "up", cluster)  # (installed already: nothing sent again, nothing restarted)
    assert again.returncode == 0 and "head already running" in again.stdout, again.stdout + again.stderr
    down = _phalanx(h, "down", cluster)
    assert down.returncode == 0, down.stdout + down.stderr
