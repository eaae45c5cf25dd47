"""The self-contained wheel (scripts/wheel.sh): built, checked with `auditwheel show`, installed into a
fresh virtual environment, then the demo and a 2-node CLI cluster run from it with PATH holding only
that environment (no system redis-server reachable) and no library path: every phalanx dependency
comes from the wheel (its ELF files resolve them in phalanx.libs)."""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

# What a manylinux system provides (auditwheel's policy): anything else must come from the wheel.
SYSTEM_LIBS = re.compile(r"^(linux-vdso|ld-linux|libc|libm|libstdc\+\+|libgcc_s|libz|libpthread|libdl|librt)[.-]")


@pytest.fixture(scope="module")
def wheel(phalanx_wheel):
    return phalanx_wheel


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    env_dir = tmp_path_factory.mktemp("venv") / "v"
    base = getattr(sys, "_base_executable", None) or shutil.which("python3")
    subprocess.run([base, "-m", "venv", str(env_dir)], check=True, timeout=120)
    p = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", wheel[0]],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return env_dir


def _bare_env(venv, tmp_path):
    """Only the fresh environment on PATH; no library path; a home and records of the test's own."""
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path), "PHALANX_TMPDIR": str(tmp_path / "phx"),
           "LANG": "C.UTF-8"}
    assert shutil.which("redis-server", path=env["PATH"]) is None
    return env


def test_the_wheel_is_manylinux_and_carries_its_libraries_and_redis(wheel, venv):
    path, log = wheel
    assert re.search(r'is consistent with\s+the following platform tag: "manylinux_2_\d+_x86_64"', log), log[-2000:]
    site = glob.glob(str(venv / "lib" / "python*" / "site-packages"))[0]
    elves = glob.glob(os.path.join(site, "phalanx", "bin", "*")) + glob.glob(os.path.join(site, "phalanx", "*.so"))
    names = {os.path.basename(e) for e in elves}
    assert {"phalanx-raylet", "redis-server"} <= names, names
    grafted = os.path.join(site, "phalanx.libs")
    for elf in elves:
        out = subprocess.run(["ldd", elf], capture_output=True, text=True, env={}).stdout
        for line in out.splitlines():
            lib = os.path.basename(line.split()[0])
            if SYSTEM_LIBS.match(lib):
                continue
            assert "=>" in line and "not found" not in line, f"{elf}: {line.strip()}"
            resolved = os.path.normpath(line.split("=>")[1].split("(")[0].strip())
            assert resolved.startswith(grafted + os.sep), f"{elf}: {line.strip()}"


# The system's copies of what phalanx links or runs, hidden (a mount namespace of the test's own binds
# /dev/null over each) while the wheel's programs run: they can only use the wheel's.
_HIDDEN = ["libprotobuf.so*", "libhiredis.so*", "libjemalloc.so*", "libssl.so*", "libcrypto.so*"]
_SCENARIO = r"""
set -u
for f in $HIDE; do "$MOUNT" --bind /dev/null "$f" || exit 97; done
trap 'phalanx stop > stop.out 2>&1' EXIT
python -c "import ctypes; ctypes.CDLL('libprotobuf.so.32')" > hidden.out 2>&1 && exit 98  # (must fail: hidden)
python demo.py > demo.out 2>&1 || exit 10
python -c "import phalanx; from phalanx._private import node; print(phalanx.__file__); print(node.redis_binary())" \
  > where.out 2>&1 || exit 11
phalanx start --head --num-cpus 1 > head.out 2>&1 || exit 12
addr=$("$SED" -n 's/.*GCS at \([^ ]*\).*/\1/p' head.out)
phalanx start --address "$addr" --num-cpus 1 --resources '{"second": 1}' --wait-for-nodes 2 --wait-timeout 60 \
  > node.out 2>&1 || exit 13
python driver.py "$addr" > driver.out 2>&1 || exit 14
"""
_DRIVER = """import sys, phalanx
phalanx.init(address=sys.argv[1])
@phalanx.remote(resources={"second": 1})
def f(x):
    return x * 2
print("result", phalanx.get(f.remote(21), timeout=60))
"""


def test_the_demo_and_a_two_node_cli_cluster_run_from_the_wheel_alone(venv, tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare (a mount namespace hides the system's libraries)")
    env = _bare_env(venv, tmp_path)
    hide = sorted({os.path.realpath(f) for pattern in _HIDDEN
                   for f in glob.glob(os.path.join("/usr/lib/x86_64-linux-gnu", pattern))} |
                  {os.path.realpath(f) for f in ("/usr/bin/redis-server",) if os.path.exists(f)})
    env["HIDE"] = " ".join(hide)
    env["MOUNT"], env["SED"] = shutil.which("mount"), shutil.which("sed")  # (PATH holds the venv alone)
    shutil.copy(os.path.join(ROOT, "examples", "demo.py"), tmp_path / "demo.py")
    (tmp_path / "driver.py").write_text(_DRIVER)
    p = subprocess.run([shutil.which("unshare"), "--mount", "--propagation", "private", "/bin/sh", "-c", _SCENARIO],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)

    def out(name):
        path = tmp_path / name
        return path.read_text() if path.exists() else "(none)"

    if p.returncode == 97:
        pytest.skip(f"cannot bind-mount here: {p.stderr.strip()}")
    assert p.returncode == 0, (f"step {p.returncode} failed: {p.stderr}\n"
                               + "\n".join(f"--- {n}\n{out(n)[-1500:]}" for n in
                                           ("hidden.out", "demo.out", "where.out", "head.out", "node.out",
                                            "driver.out")))
    assert out("where.out").count(str(venv)) == 2, out("where.out")  # (its own package and redis-server)
    assert "result 42" in out("driver.out"), out("driver.out")
    assert "stopped" in out("stop.out"), out("stop.out")
