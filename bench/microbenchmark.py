"""The microbenchmark (python/phalanx/microbenchmark.py: `python -m
phalanx.microbenchmark`), run from this checkout's source against the
phalanx that Python imports: the venv's, or another build's with PYTHONPATH,
older builds without the module included (bench/ab_microbenchmark.py,
bench/row_ab.py).

    .venv/bin/python bench/microbenchmark.py --peers ray --json out.json
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "python", "phalanx", "microbenchmark.py")

spec = importlib.util.spec_from_file_location("phalanx_microbenchmark_source", SOURCE)
microbenchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(microbenchmark)

if __name__ == "__main__":
    sys.exit(microbenchmark.main(child=[sys.executable, os.path.abspath(__file__)]))
