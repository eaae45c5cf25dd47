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
            token, running = self._prepare(c.head_ip, None)
            if running:
                self._say(f"{c.head_ip}: head already running")
            else:
                self._start(c.head_ip, ["start", "--head", "--node-ip", c.head_ip, "--port", str(c.gcs_port)]
                            + c.head_start_options)
                started.append(c.head_ip)
        except (SshError, _HostError) as e:
            raise LaunchError({c.head_ip: _why(e)}, []) from None
        for host in c.worker_ips:
            try:
                _, running = self._prepare(host, token)
                if running:
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
        """Readies `host` in one SSH round trip (two more to install a wheel there): runs setup_commands,
        checks its Python and phalanx, puts the cluster token in its state folder (the head keeps the one it
        has, else takes a new one) and says whether a node of this cluster file runs there already (a live
        raylet in what its `phalanx start` recorded). (the token, whether a node runs there)."""
        ssh = self._hosts[host]
        head = token is None
        setup_first = self._installer is not None and self._c.setup_commands  # (they may install what pip needs)
        if setup_first:
            self._check(ssh.run(self._setup_script()))
        if self._installer is not None:
            try:
                self._installer.install(ssh)
            except RuntimeError as e:
                raise _HostError(str(e)) from None
        script = ("" if setup_first else self._setup_script()) + self._ready_script(host, head)
        out = self._check(ssh.run(script, stdin=(secrets.token_hex(32) if head else token) + "\n"), host)
        lines = out.strip().splitlines()
        state = json.loads(lines[-1])
        if head:
            token = next(line[len("token "):] for line in lines if line.startswith("token "))
        return token, state["running"]

    def _setup_script(self):
        """Shell text running the setup commands in order (stdin: none), the first failing one ending the script
        with 100 + its index, its output's tail and its exit code on stderr."""
        return "".join(f"_out=$( (sh -c {shlex.quote(cmd)}) </dev/null 2>&1 ); _c=$?; if [ $_c -ne 0 ]; then "
                       f"printf '%s' \"$_out\" | tail -c 300 >&2; echo >&2; echo \"setup-exit $_c\" >&2; "
                       f"exit {100 + i}; fi; "
                       for i, cmd in enumerate(self._c.setup_commands))

    def _ready_script(self, host, head):
        """Shell text that reads the token on stdin (first, before anything else can), checks the Python,
        writes the token, and prints (the head's token line and) the probe's JSON."""
        d, py = self._dir(host), self._py
        keep = f"[ -s {d}/token ] || " if head else ""
        return (f"IFS= read -r _t || exit 92; command -v {py} >/dev/null 2>&1 || exit 90; "
                f"umask 077 && mkdir -p {d} && chmod 700 {d} || exit 92; "
                f"{keep}{{ printf '%s\\n' \"$_t\" > {d}/token.new && mv {d}/token.new {d}/token; }} || exit 92; "
                + (f"printf 'token %s\\n' \"$(cat {d}/token)\"; " if head else "")
                + f"PHALANX_TMPDIR={d}/tmp exec {py} -c {shlex.quote(_PROBE)}")

    def _check(self, result, host=None):
        """The output of a _prepare script that exited 0; _HostError saying what failed otherwise."""
        code, out, err = result
        if code == 0:
            return out
        if 100 <= code < 100 + len(self._c.setup_commands):
            tail, _, exit_line = err.rstrip().rpartition("\n")
            return_code = exit_line.split()[-1] if exit_line.startswith("setup-exit") else "?"
            raise _HostError(f"setup command {self._c.setup_commands[code - 100]!r} exited with {return_code}: "
                             f"{tail.strip()[-300:]}")
        if code == 90:
            raise _HostError(f"no Python at {self._c.python} (the cluster file's `python`)")
        if code == 91:
            raise _HostError(f"{self._c.python} has no phalanx: {err.strip()[-200:]} (install the wheel there, or "
                             "point `python` at an environment that has it)")
        if code == 92:
            raise _HostError(f"cannot write the cluster token into {self._dir(host)}: {err.strip()[-200:]}")
        raise _HostError(f"checking its Python failed ({code}): {err.strip()[-200:]}")

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


# Run on a host by its Python with PHALANX_TMPDIR set to the cluster's state there: exit 91 without phalanx;
# else JSON saying whether a raylet that host's `phalanx start` recorded is alive (/proc: its command line).
_PROBE = """import json, sys
try:
    import phalanx
    from phalanx._private.cluster_records import records
except Exception as e:
    print(f"{type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(91)
def raylet(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"raylet" in f.read()
    except OSError:
        return False
print(json.dumps({"version": phalanx.__version__, "running": any(
    raylet(p["pid"]) for _, r in records() for p in r.get("procs", []) if p.get("name") == "raylet")}))
"""


def _why(e):
    return str(e).split(": ", 1)[1] if isinstance(e, SshError) else str(e)
