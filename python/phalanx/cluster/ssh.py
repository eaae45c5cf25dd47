"""SshHost: commands on one host of a cluster file, through OpenSSH's `ssh` client (the one every
machine that reaches its hosts has, with the user's own configuration and agent).

Never interactive (BatchMode: a missing key or an unknown password is an error, not a prompt),
every connection within a timeout, a new host's key accepted the first time and checked after
(StrictHostKeyChecking=accept-new). Secrets go on the remote command's standard input, never on
its command line (which `ps` shows). A failure names the host and says which kind it is."""
import shlex
import subprocess


class SshError(RuntimeError):
    """A host that could not be reached or refused the key (the message names the host and the reason)."""

    def __init__(self, host, why):
        super().__init__(f"{host}: {why}")
        self.host = host


class SshHost:
    def __init__(self, host, user, key, port=22, known_hosts=None, connect_timeout_s=10):
        self.host = host
        self._argv = ["ssh", "-i", key, "-p", str(port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                      "-o", f"ConnectTimeout={connect_timeout_s}", "-o", "StrictHostKeyChecking=accept-new",
                      "-o", "LogLevel=ERROR", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        if known_hosts:
            self._argv += ["-o", f"UserKnownHostsFile={known_hosts}"]
        self._argv += [f"{user}@{host}"]

    def run(self, script, stdin=None, timeout_s=120):
        """Runs `script` with /bin/sh on the host; (exit code, stdout, stderr). SshError when the
        host cannot be reached or refuses us; a command's own failure is its exit code."""
        binary = isinstance(stdin, bytes)  # (a file sent over: bytes in, its output decoded after)
        try:
            p = subprocess.run(self._argv + ["--", "sh -c " + shlex.quote(script)], input=stdin, capture_output=True,
                               text=not binary, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SshError(self.host, f"no answer within {timeout_s} s") from None
        except FileNotFoundError:
            raise SshError(self.host, "no `ssh` client on this machine (Debian: apt-get install openssh-client)") \
                from None
        out, err = (p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")) if binary else (p.stdout,
                                                                                                         p.stderr)
        if p.returncode == 255:  # ssh's own failures
            raise SshError(self.host, _reason(err))
        return p.returncode, out, err

    def stream(self, script, timeout_s=None):
        """Runs `script` with its output passed through to this process's; its exit code."""
        try:
            p = subprocess.run(self._argv + ["--", "sh -c " + shlex.quote(script)], timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SshError(self.host, f"the command ran past {timeout_s} s") from None
        return p.returncode


def _reason(stderr):
    text = " ".join(stderr.split())
    for needle, why in (("Permission denied", "the host refused the key (Permission denied): check auth.ssh_user "
                                              "and auth.ssh_private_key"),
                        ("Connection refused", "nothing accepts SSH connections there (Connection refused)"),
                        ("timed out", "unreachable (the connection timed out)"),
                        ("No route to host", "unreachable (No route to host)"),
                        ("Could not resolve", "unknown host name"),
                        ("Network is unreachable", "unreachable (Network is unreachable)"),
                        ("REMOTE HOST IDENTIFICATION HAS CHANGED", "its SSH host key changed since it was first "
                                                                  "seen: refused (check known_hosts)")):
        if needle in text:
            return f"{why}; ssh said: {text[:300]}"
    return f"ssh failed: {text[:300] or 'no message'}"
