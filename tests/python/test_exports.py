"""What phalanx's installed binaries export, and the import order of a GPU
user's actor (phalanx first, then torch).

A binary loaded beside torch must not export C++ library code: an extension
that carried libstdc++ (linked statically) and exported it made libstdc++'s
own calls run phalanx's copy once torch was imported after phalanx, and the
process aborted with `free(): invalid pointer` (docs/gpu.md). The extension
exports its module init only; the raylet nothing; the C++ worker the C++ API
(the libraries it loads bind to it). An executable's copies of the runtime's
data (copy relocations: std::cerr, vtables of libstdc++'s streams) stay
exported with libstdc++'s version tag: they are where libstdc++'s own
references point, which is what the dynamic linker needs of them."""
import glob
import os
import subprocess
import sys

import pytest

import phalanx

PACKAGE = os.path.dirname(phalanx.__file__)
CORE = glob.glob(os.path.join(PACKAGE, "_core*.so"))
RAYLET = os.path.join(PACKAGE, "bin", "phalanx-raylet")
CPP_WORKER = os.path.join(PACKAGE, "bin", "phalanx-cpp-worker")
# Mangled prefixes of the C++ API that phalanx-cpp-worker exports (worker/cpp_worker.map).
CPP_API_PREFIXES = ("_ZN7phalanx", "_ZZN7phalanx", "_ZGVZN7phalanx", "_ZTIN7phalanx", "_ZTSN7phalanx",
                    "_ZTVN7phalanx")
# Symbols defined only by the C++ runtime's own code: a binary that defines one carries libstdc++ or libsupc++.
RUNTIME_SENTINELS = ("_ZNSt6locale5_ImplD1Ev", "_ZNSt8ios_base4InitC1Ev", "__cxa_throw", "_Znwm",
                     "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE")


def installed():
    """Every binary the package installs."""
    found = CORE + sorted(glob.glob(os.path.join(PACKAGE, "bin", "*")))
    assert CORE and os.path.exists(RAYLET), f"the installed package in {PACKAGE} lacks its binaries"
    return found


def exported(path):
    """The names (mangled, without version tags) a binary defines in its dynamic symbol table."""
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def copy_relocated(path):
    """The names the executable holds copies of for the shared libraries (R_X86_64_COPY and the like)."""
    out = subprocess.run(["readelf", "-rW", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[4].split("@")[0] for line in out.splitlines() if "_COPY" in line}


def defined(path):
    """Every name a binary defines, from its full symbol table (the installed binaries are not stripped)."""
    out = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) >= 3}


def test_the_extension_exports_only_its_module_init():
    for path in CORE:
        assert exported(path) == {"PyInit__core"}, f"{os.path.basename(path)} exports more than PyInit__core"


def test_the_raylet_exports_nothing_of_its_own():
    extra = exported(RAYLET) - copy_relocated(RAYLET)
    assert not extra, f"phalanx-raylet exports {sorted(extra)[:10]}"


@pytest.mark.skipif(not os.path.exists(CPP_WORKER), reason="the C++ API is not built (msgpack-c missing)")
def test_the_cpp_worker_exports_the_cpp_api_and_nothing_else():
    names = exported(CPP_WORKER)
    extra = {n for n in names - copy_relocated(CPP_WORKER) if not n.startswith(CPP_API_PREFIXES)}
    assert not extra, f"phalanx-cpp-worker exports {sorted(extra)[:10]} beside the C++ API"
    # What a PHALANX_REMOTE library binds to: the registry, and the calls its templates make.
    assert "_ZN7phalanx8internal10SplitNamesB5cxx11EPKc" in names
    assert any(n.startswith("_ZZN7phalanx8internal8Registry3GetEvE1r") for n in names)


def test_no_installed_binary_carries_the_cpp_runtime():
    for path in installed():
        carried = sorted(set(RUNTIME_SENTINELS) & defined(path))
        assert not carried, f"{os.path.basename(path)} defines {carried}: libstdc++ is linked into it"


def _python(code, timeout=180):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


# Exercises libstdc++'s streams and locales from torch's side: repr of tensors (c10's formatting), a
# scripted function (torch::jit, where the abort was seen), and a caught error message.
TORCH_WORK = r"""
import torch
s = repr(torch.arange(6.0).reshape(2, 3)) + str(torch.zeros(2, dtype=torch.bfloat16))
cu = torch.jit.CompilationUnit("def f(x):\n    return x * 2 + 1\n")
assert torch.equal(cu.f(torch.ones(3)), torch.full((3,), 3.0))
try:
    torch.ones(2, 3) @ torch.ones(2, 3)
except RuntimeError as e:
    s += str(e)
print("torch ok", len(s))
"""


def test_phalanx_then_torch_in_one_process():
    pytest.importorskip("torch", reason="torch is not installed (pip install '.[test]' installs it)")
    for first in ("import phalanx._core", "import phalanx"):
        r = _python(f"{first}\n{TORCH_WORK}")
        assert r.returncode == 0 and "torch ok" in r.stdout, f"{first}; import torch: rc {r.returncode}\n{r.stderr[-2000:]}"


@phalanx.remote
class FreshWorker:
    """An actor is a process of its own: phalanx is imported there before the user's code runs."""

    def torch_after_phalanx(self, code):
        had_torch = "torch" in sys.modules
        out = {}
        exec(code, out)
        return had_torch, "torch" in sys.modules


def test_a_worker_imports_torch_after_phalanx(cluster):
    pytest.importorskip("torch", reason="torch is not installed (pip install '.[test]' installs it)")
    actor = FreshWorker.remote()
    try:
        had_torch, has_torch = phalanx.get(actor.torch_after_phalanx.remote(TORCH_WORK), timeout=180)
        assert not had_torch and has_torch, "the actor's process should have imported torch only for this call"
    finally:
        phalanx.kill(actor)
