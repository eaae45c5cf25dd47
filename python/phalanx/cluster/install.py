"""WheelInstaller: phalanx installed on a host from the cluster file's `wheel`, once per wheel.

The wheel and its dependencies' wheels (a folder given as `wheel`, or what `pip download` fetches
here for a single wheel) travel as one tar over SSH's standard input; the host makes a virtual
environment of its own Python under the cluster's state folder, named by the digest of that
bundle, and installs from the bundle alone (`pip --no-index`: the host needs no package index).
A host that has that environment already is left as it is."""
import gzip
import hashlib
import io
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile


class WheelInstaller:
    def __init__(self, wheel, base_python, state_base):
        """`wheel`: a wheel file or a folder of wheels, here; `base_python`: the hosts' Python that makes the
        environment; `state_base`: the hosts' state folder, as shell text."""
        self._wheel = wheel
        self._base_python = base_python
        self._state_base = state_base
        self._bundle = None

    def _bundled(self):
        """(digest, tar.gz bytes) of the wheels to send."""
        if self._bundle is None:
            if os.path.isdir(self._wheel):
                folder = self._wheel
                data = self._tar(folder)
            else:
                with tempfile.TemporaryDirectory() as folder:
                    p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                                        "--dest", folder, self._wheel], capture_output=True, text=True, timeout=600)
                    if p.returncode != 0:
                        raise RuntimeError(f"cannot gather the wheel's dependencies here (pip download): "
                                           f"{p.stderr.strip()[-300:]}; give `wheel` a folder of wheels instead")
                    data = self._tar(folder)
            self._bundle = (hashlib.sha256(data).hexdigest()[:16], data)
        return self._bundle

    @staticmethod
    def _tar(folder):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for name in sorted(os.listdir(folder)):
                if name.endswith(".whl"):
                    info = t.gettarinfo(os.path.join(folder, name), arcname=name)
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    with open(os.path.join(folder, name), "rb") as f:
                        t.addfile(info, f)
        return gzip.compress(buf.getvalue(), compresslevel=1, mtime=0)  # (the same wheels: the same bytes)

    def venv(self):
        """The environment's folder on the hosts, as shell text."""
        return f"{self._state_base}/venvs/{self._bundled()[0]}"

    def install(self, ssh):
        """Makes the environment on `ssh`'s host unless it is there; raises RuntimeError saying why not."""
        digest, data = self._bundled()
        v = self.venv()
        script = (f"if [ -x {v}/bin/python ] && {v}/bin/python -c 'import phalanx' 2>/dev/null; then cat > /dev/null; "
                  f"exit 0; fi; set -e; rm -rf {v} {v}.src; mkdir -p {v}.src; tar -xzf - -C {v}.src; "
                  f"command -v {shlex.quote(self._base_python)} > /dev/null || exit 90; "
                  f"{shlex.quote(self._base_python)} -m venv {v}; "
                  f"{v}/bin/python -m pip install -q --no-index --find-links {v}.src {v}.src/phalanx-*.whl; "
                  f"rm -rf {v}.src")
        code, out, err = ssh.run(script, stdin=data, timeout_s=900)
        if code == 90:
            raise RuntimeError(f"no Python at {self._base_python} to install the wheel with (the cluster file's "
                               "`python`)")
        if code != 0:
            raise RuntimeError(f"installing the wheel failed ({code}): {(err or out).strip()[-400:]}")
