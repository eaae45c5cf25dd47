"""ClusterLauncher: `phalanx up / down / exec` of a cluster file, over SSH (docs/cluster.md).

`up` checks each host (its Python has phalanx), runs the file's setup_commands, gives it the
cluster token over SSH (into a 0600 file in the host's state folder, read by the start command's
shell: never on a command line), starts the head, then each worker not already alive, waits for
them to register, and prints the address and a status table. It is idempotent: what runs already
is left alone. A host that fails is named with the reason; the others go on, and `down` stops
whatever did start. `exec` runs a command on the head as a driver of the cluster."""
import json
import secrets
import shlex
import sys
import time

from phalanx.cluster.install import WheelInstaller
from phalanx.cluster.ssh import SshError, SshHost


class LaunchError(RuntimeError):
    """Some hosts did not start: `failed` maps each to its reason, `started` lists those that did."""

    def __init__(self, failed, started):
        lines = [f"  {h}: {why}" for h, why in failed.items()]
        tail = (f"started: {', '.join(started)} (`phalanx down` stops them)" if started else "nothing was started")
        super().__init__("these hosts did not start:\n" + "\n".join(lines) + "\n" + tail)
        self.failed = failed
        self.started = started


class ClusterLauncher:
    def __init__(self, config, out=sys.stdout, register_timeout_s=60.0):
        self._c = config
        self._out = out
        self._register_timeout_s = register_timeout_s
        self._hosts = {h: SshHost(h, config.ssh_user, config.ssh_private_key, config.ssh_port, config.ssh_known_hosts)
                       for h in config.hosts}
        base = config.state_dir
        self._state_base = "$HOME" + base[1:] if base.startswith("~") else shlex.quote(base)
        # The hosts' Python with phalanx, as shell text: the file's, or a venv of it made from `wheel`.
        self._installer = WheelInstaller(config.wheel, config.python, self._state_base) if config.wheel else None
        self._py = self._installer.venv() + "/bin/python" if self._installer else shlex.quote(config.python)

    def _say(self, line):
        print(line, file=self._out, flush=True)

    def _dir(self, host):
        """The host's state folder for this cluster (0700: its token; under tmp/, what `phalanx start` keeps
        there as PHALANX_TMPDIR), as shell text."""
        return f"{self._state_base}/{self._c.cluster_name}-{host}"

    def _phalanx(self, host, args):
        """Shell text running `python -m phalanx.scripts ARGS` on `host` with the cluster's token and records."""
        d = self._dir(host)
        return (f"export PHALANX_TMPDIR={d}/tmp PHALANX_CLUSTER_TOKEN=\"$(cat {d}/token)\"; "
                f"exec {self._py} -m phalanx.scripts {' '.join(shlex.quote(a) for a in args)}")

    # up
    def up(self):
        c = self._c
        failed, started = {}, []
        try:
            token = self._prepare(c.head_ip, None)
            if self._alive_ips() is None:
                self._start(c.head_ip, ["start", "--head", "--node-ip", c.head_ip, "--port", str(c.gcs_port)]
                            + c.head_start_options)
                started.append(c.head_ip)
            else:
                self._say(f"{c.head_ip}: head already running")
        except (SshError, _HostError) as e:
            raise LaunchError({c.head_ip: _why(e)}, []) from None
        alive = set(self._alive_ips() or ())
        for host in c.worker_ips:
            try:
                self._prepare(host, token)
                if host in alive:
                    self._say(f"{host}: node already running")
                    continue
                self._start(host, ["start", "--address", c.address, "--node-ip", host] + c.worker_start_options)
                started.append(host)
            except (SshError, _HostError) as e:
                failed[host] = _why(e)
                self._say(f"{host}: FAILED: {_why(e)}")
        want = {c.head_ip} | (set(c.worker_ips) - set(failed))
        self._wait_registered(want)
        self._say(f"\nphalanx cluster '{c.cluster_name}' is up: GCS at {c.address}\n"
                  f"  run a command on the head: phalanx exec CLUSTER.yaml -- python script.py\n"
                  f"  submit a job:              phalanx job submit --address {c.address} -- python script.py "
                  "(with the cluster token)\n")
        _, out, _ = self._hosts[c.head_ip].run(self._phalanx(c.head_ip, ["status", "--address", c.address]))
        self._say(out.rstrip())
        if failed:
            raise LaunchError(failed, started)
        return started

    def _prepare(self, host, token):
        """Checks the host's Python and phalanx, runs setup_commands, and puts the cluster token in its state
        folder (the head's own, or a new one for a new cluster); the token."""
        ssh = self._hosts[host]
        for cmd in self._c.setup_commands:
            code, out, err = ssh.run(cmd)
            if code != 0:
                raise _HostError(f"setup command {cmd!r} exited with {code}: {(err or out).strip()[-300:]}")
        if self._installer is not None:
            try:
                self._installer.install(ssh)
            except RuntimeError as e:
                raise _HostError(str(e)) from None
        py = self._py
        code, out, err = ssh.run(f"command -v {py} >/dev/null 2>&1 || exit 90; "
                                 f"{py} -c 'import phalanx; print(phalanx.__version__)' || exit 91")
        if code == 90:
            raise _HostError(f"no Python at {self._c.python} (the cluster file's `python`)")
        if code == 91:
            raise _HostError(f"{self._c.python} has no phalanx: {err.strip()[-200:]} (install the wheel there, or "
                             "point `python` at an environment that has it)")
        if code != 0:
            raise _HostError(f"checking its Python failed ({code}): {err.strip()[-200:]}")
        d = self._dir(host)
        if token is None:  # the head: keep the token it has (a cluster running already), else make one
            code, out, _ = ssh.run(f"cat {d}/token 2>/dev/null")
            token = out.strip() if code == 0 and out.strip() else secrets.token_hex(32)
        code, _, err = ssh.run(f"umask 077 && mkdir -p {d} && chmod 700 {d} && cat > {d}/token.new && "
                               f"mv {d}/token.new {d}/token", stdin=token)
        if code != 0:
            raise _HostError(f"cannot write the cluster token into {d}: {err.strip()[-200:]}")
        return token

    def _start(self, host, args):
        code, out, err = self._hosts[host].run(self._phalanx(host, args) + " 2>&1")
        if code != 0:
            raise _HostError(f"`phalanx {' '.join(args[:2])}` exited with {code}: {(out + err).strip()[-400:]}")
        self._say(f"{host}: started ({' '.join(args[:2])})")

    def _alive_ips(self):
        """The addresses of the alive nodes the head's GCS lists, or None when no GCS answers there."""
        c = self._c
        probe = (f"from phalanx._private.rpc_tables import alive_nodes; import json; "
                 f"print(json.dumps([n['address'] for n in alive_nodes({c.address!r})]))")
        d = self._dir(c.head_ip)
        code, out, _ = self._hosts[c.head_ip].run(
            f"PHALANX_CLUSTER_TOKEN=\"$(cat {d}/token 2>/dev/null)\" {self._py} -c {shlex.quote(probe)}")
        if code != 0:
            return None
        return json.loads(out.strip().splitlines()[-1])

    def _wait_registered(self, want):
        deadline = time.monotonic() + self._register_timeout_s
        while True:
            alive = set(self._alive_ips() or ())
            if want <= alive:
                return
            if time.monotonic() > deadline:
                raise LaunchError({h: f"did not register with the GCS within {self._register_timeout_s:g} s "
                                      f"(its logs: {self._dir(h)})" for h in sorted(want - alive)},
                                  sorted(alive))
            time.sleep(0.5)

    # down
    def down(self):
        """Stops what `up` started on every host (workers first); the hosts that could not be reached."""
        unreachable = {}
        for host in list(self._c.worker_ips) + [self._c.head_ip]:
            try:
                code, out, err = self._hosts[host].run(
                    f"[ -d {self._dir(host)} ] || exit 0; " + self._phalanx(host, ["stop"]))
                self._say(f"{host}: {(out.strip().splitlines() or ['nothing to stop'])[-1]}")
            except SshError as e:
                unreachable[host] = _why(e)
                self._say(f"{host}: FAILED: {_why(e)}")
        return unreachable

    # exec
    def exec(self, argv):
        """Runs `argv` on the head as a driver of the cluster (PHALANX_ADDRESS set); its exit code."""
        c = self._c
        cmd = " ".join(shlex.quote(a) for a in argv)
        d = self._dir(c.head_ip)
        path = f"export PATH=\"$(dirname {self._py}):$PATH\"; " if "/" in self._py else ""
        return self._hosts[c.head_ip].stream(
            f"export PHALANX_TMPDIR={d}/tmp PHALANX_ADDRESS={c.address} PHALANX_CLUSTER_TOKEN=\"$(cat {d}/token)\"; "
            f"{path}{cmd}")


class _HostError(RuntimeError):
    pass


def _why(e):
    return str(e).split(": ", 1)[1] if isinstance(e, SshError) else str(e)
