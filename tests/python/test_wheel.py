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


def test_the_demo_and_a_two_node_cli_cluster_run_from_the_wheel_alone(venv, tmp_path):
    env = _bare_env(venv, tmp_path)
    py = str(venv / "bin" / "python")
    shutil.copy(os.path.join(ROOT, "examples", "demo.py"), tmp_path / "demo.py")
    demo = subprocess.run([py, "demo.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    where = subprocess.run([py, "-c", "import phalanx; from phalanx._private import node; "
                                      "print(phalanx.__file__); print(node.redis_binary())"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.count(str(venv)) == 2, where.stdout + where.stderr  # (its own package and redis-server)

    cli = str(venv / "bin" / "phalanx")

    def run(*args):
        p = subprocess.run([cli, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"phalanx {' '.join(args)}:\n{p.stdout}\n{p.stderr}"
        return p.stdout

    try:
        address = run("start", "--head", "--num-cpus", "1").split("GCS at ")[1].split()[0]
        run("start", "--address", address, "--num-cpus", "1", "--resources", '{"second": 1}',
            "--wait-for-nodes", "2", "--wait-timeout", "60")
        driver = ("import phalanx, os\n"
                  f"phalanx.init(address={address!r})\n"
                  "@phalanx.remote(resources={'second': 1})\n"
                  "def f(x):\n    return x * 2, os.getpid()\n"
                  "print('result', phalanx.get(f.remote(21), timeout=60)[0])\n")
        p = subprocess.run([py, "-c", driver], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert "result 42" in p.stdout, p.stdout + p.stderr
    finally:
        subprocess.run([cli, "stop"], cwd=tmp_path, env=env, capture_output=True, timeout=120)
