"""How backend="nccl" sets NCCL up, checked without a GPU: which libnccl a
process uses (the one already loaded, torch's, before any other), the
bootstrap interface (the one holding the node's address: loopback for a
cluster on one machine), NCCL_ variables reaching workers, and an init that
fails naming the library, NCCL's version and the interface, leaving the
group's name free.

NCCL itself needs a GPU, so here a small C library with NCCL's entry points
stands in for it (built by the test with the C compiler): its
ncclCommInitRank records the NCCL_SOCKET_IFNAME it sees and fails as NCCL
does when its bootstrap connection breaks (error 6). Each case runs in a
process of its own, so that no stand-in stays loaded in the test process
(the GPU tests of the device run use the real NCCL). On a GPU machine
tests/python/test_gpu.py runs the real one (scripts/device_test.sh)."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import phalanx
from phalanx._private import nccl

FAKE_NCCL = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
const char* ncclGetErrorString(int code) {
  return code == 6 ? "remote process exited or there was a network error" : "fake error";
}
int ncclGetVersion(int* v) { *v = 22703; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) { memset(id->internal, 7, sizeof id->internal); return 0; }
int ncclCommInitRank(void** comm, int n, ncclUniqueId id, int rank) {
  const char* out = getenv("FAKE_NCCL_SAW");
  const char* ifname = getenv("NCCL_SOCKET_IFNAME");
  if (out != NULL) { FILE* f = fopen(out, "w"); fprintf(f, "%s", ifname ? ifname : "(unset)"); fclose(f); }
  return 6;
}
#define STUB(name) int name() { return 5; }
STUB(ncclAllReduce) STUB(ncclReduceScatter) STUB(ncclBroadcast) STUB(ncclAllGather) STUB(ncclSend)
STUB(ncclRecv) STUB(ncclCommGetAsyncError) STUB(ncclCommAbort) STUB(ncclCommDestroy)
"""

# What the child process does before init_group: a CUDA device as far as nccl.py asks (torch's CPU build
# says there is none), nothing else changed.
PRETEND_GPU = """
import torch
torch.cuda.is_available = lambda: True
torch.cuda.current_device = lambda: 0
"""


@pytest.fixture(scope="module")
def fake_nccl(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in NCCL (scripts/setup.sh installs build-essential)")
    d = tmp_path_factory.mktemp("fake-nccl")
    (d / "fake_nccl.c").write_text(FAKE_NCCL)
    libs = []
    for copy in ("a", "b"):  # two copies at two paths: the "already loaded" case needs a second one
        (d / copy).mkdir()
        lib = d / copy / "libnccl.so.2"
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(d / "fake_nccl.c")], check=True)
        libs.append(str(lib))
    return libs


@pytest.fixture(scope="module")
def torch_nccl():
    """The libnccl that `import torch` maps (torch's CUDA build links its own), or None (the CPU build)."""
    pytest.importorskip("torch", reason="torch is not installed (pip install '.[test]' installs it)")
    r = subprocess.run([sys.executable, "-c", "import torch\nfrom phalanx._private import nccl\n"
                        "print(nccl.loaded_in_process())"], capture_output=True, text=True, timeout=120, check=True)
    found = r.stdout.strip().splitlines()[-1]
    return None if found == "None" else found


@pytest.fixture
def stand_in_usable(torch_nccl):
    if torch_nccl is not None:
        pytest.skip(f"import torch loads the real NCCL ({torch_nccl}), which a process then uses, not the "
                    "stand-in: test_gpu.py tests the real one here")


def run_child(code, env_extra, timeout=120):
    pytest.importorskip("torch", reason="torch is not installed (pip install '.[test]' installs it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "PHALANX_"))}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, f"the child failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def test_a_failed_init_names_library_version_and_interface_and_frees_the_name(fake_nccl, stand_in_usable, tmp_path):
    saw = tmp_path / "ifname"
    out = run_child(PRETEND_GPU + """
import numpy as np
import phalanx
from phalanx.exceptions import CollectiveError
phalanx.init(num_cpus=1, object_store_memory=1 << 28)
for attempt in range(2):  # the name stays free: the same call fails the same way, not "already in group"
    try:
        phalanx.collective.init_group(1, 0, "g", backend="nccl", timeout=20)
    except CollectiveError as e:
        print("ERROR", e)
a = np.ones(4)
phalanx.collective.init_group(1, 0, "g", timeout=20)  # and a group of the object layer can take it
phalanx.collective.allreduce(a, group_name="g", timeout=20)
phalanx.collective.destroy_group("g")
print("OBJECT GROUP", a.tolist())
phalanx.shutdown()
""", {"PHALANX_NCCL_LIBRARY": fake_nccl[0], "FAKE_NCCL_SAW": str(saw)})
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2, out
    for e in errors:
        assert "ncclCommInitRank as rank 0 of 1 failed: NCCL error 6" in e
        assert f"library {fake_nccl[0]}" in e and "NCCL 2.27.3" in e
        assert "bootstrap interface lo (the interface of this node's address 127.0.0.1)" in e
        assert "NCCL_DEBUG=INFO" in e and "its name is free for another init_group" in e
    assert "OBJECT GROUP [1.0, 1.0, 1.0, 1.0]" in out
    assert saw.read_text() == "=lo", "NCCL's bootstrap should have been told to use loopback exactly"


def test_the_users_interface_and_nccl_debug_are_kept(fake_nccl, stand_in_usable, tmp_path):
    saw = tmp_path / "ifname"
    out = run_child(PRETEND_GPU + """
import phalanx
from phalanx.exceptions import CollectiveError
phalanx.init(num_cpus=1, object_store_memory=1 << 28)
try:
    phalanx.collective.init_group(1, 0, "g", backend="nccl", timeout=20)
except CollectiveError as e:
    print("ERROR", e)
phalanx.shutdown()
""", {"PHALANX_NCCL_LIBRARY": fake_nccl[0], "FAKE_NCCL_SAW": str(saw), "NCCL_SOCKET_IFNAME": "eth7",
      "NCCL_DEBUG": "WARN"})
    assert "bootstrap interface eth7 (NCCL_SOCKET_IFNAME, as set)" in out
    assert "NCCL_DEBUG=WARN: NCCL's account is in this process's log" in out
    assert saw.read_text() == "eth7"


def test_a_libnccl_already_loaded_is_the_one_used(fake_nccl, torch_nccl):
    """torch's CUDA build maps its libnccl at import; with the CPU build a stand-in is loaded first instead."""
    first = torch_nccl or fake_nccl[0]
    out = run_child(PRETEND_GPU + f"""
import ctypes, os, warnings
from phalanx._private import nccl
if nccl.loaded_in_process() is None:
    ctypes.CDLL({fake_nccl[0]!r})  # as torch's CUDA build loads its own at import
import phalanx
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    nccl.library()
print("USING", nccl._lib_path)
print("WARNED", any("is not used" in str(x.message) for x in w))
maps = open("/proc/self/maps").read()
print("COPIES", len({{l.split()[-1] for l in maps.splitlines() if "libnccl" in os.path.basename(l.split()[-1])}}))
""", {"PHALANX_NCCL_LIBRARY": fake_nccl[1]})
    assert f"USING {first}" in out
    assert "WARNED True" in out, "a PHALANX_NCCL_LIBRARY that is passed over should be said"
    assert "COPIES 1" in out


def test_the_interface_is_the_one_holding_the_address():
    assert nccl.interface_of("127.0.0.1") == "lo"
    assert nccl.interface_of("127.0.0.5") == "lo"
    assert nccl.interface_of("localhost") == "lo"
    assert nccl.interface_of("192.0.2.254") is None or nccl.interface_of("192.0.2.254") != "lo"
    # Every IPv4 address `ip` lists here maps back to its interface.
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2) to compare with")
    listed = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    for line in listed.splitlines():
        fields = line.split()
        name, address = fields[1], fields[3].partition("/")[0]
        assert nccl.interface_of(address) == name, line


def test_nccl_variables_reach_the_workers(fresh_cluster, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "INIT,NET")
    fresh_cluster(num_cpus=1)

    @phalanx.remote
    def nccl_env():
        return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}

    env = phalanx.get(nccl_env.remote(), timeout=60)
    assert env.get("NCCL_DEBUG") == "INFO" and env.get("NCCL_DEBUG_SUBSYS") == "INIT,NET"
