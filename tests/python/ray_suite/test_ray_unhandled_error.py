"""Ray's `python/ray/tests/test_unhandled_error.py` (ray-project/ray), through `import ray` only: an error a
task raised that no one `ray.get`s is reported to an interactive driver (one with `sys.ps1`, as in a console
or Jupyter) within 10 s.

Changed: Ray's file is a script (its `__main__`, no pytest test; Ray runs it as a test of its own); here it is
the test `test_unhandled_error`, which runs the same script as a driver of its own. Ray's script counts the
reports by replacing `ray._private.worker._unhandled_error_handler` (private); here the report is observed where
a user sees it, in the driver's output (Ray's handler logs `Unhandled error (suppress with
'RAY_IGNORE_UNHANDLED_ERRORS=1'): ...`), read until it appears or 10 s pass, as Ray's script polls.

Left out: none."""
import os
import queue
import subprocess
import sys
import threading
import time

import ray  # noqa: F401  (which `ray` the driver imports: this one's PYTHONPATH, set by conftest)
from suite_utils import phalanx_differs

DRIVER = """
import sys
import time

import ray


@ray.remote
def f():
    raise ValueError()


# Core worker uses this to check if we are in an interactive
# console (e.g., Jupyter)
setattr(sys, "ps1", "dummy")
ray.init(num_cpus=1, address="local", **{init_kwargs!r})

# Test we report unhandled exceptions.
x1 = f.remote()
print("submitted", flush=True)
time.sleep(60)
"""


@phalanx_differs("phalanx never reports an error no one got: a driver has no unhandled-error report (Ray logs "
                 "`Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ...`)")
def test_unhandled_error(init_kwargs):
    script = DRIVER.format(init_kwargs=init_kwargs)
    proc = subprocess.Popen([sys.executable, "-u", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=os.environ.copy(), text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    out = []
    try:
        start = None
        while True:
            try:
                line = lines.get(timeout=0.1)
            except queue.Empty:
                assert proc.poll() is None, "driver exited:\n" + "".join(out)
                if start is not None:
                    assert time.time() - start < 10, "no unhandled error reported in 10 s:\n" + "".join(out)
                continue
            out.append(line)
            if line.startswith("submitted"):
                start = time.time()
            if "Unhandled error" in line and start is not None:
                break
    finally:
        proc.kill()
        proc.wait()
    print("".join(out))
