"""The examples run as a newcomer would run them, and do what they say."""
import json
import os
import re
import subprocess
import sys

import pytest

import phalanx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("naive", [False, True])
def test_async_pg_learns_cartpole_and_writes_its_curve(tmp_path, naive):
    phalanx.shutdown()  # the example starts its own cluster
    png = tmp_path / "curve.png"
    cmd = [sys.executable, os.path.join(ROOT, "examples", "rl", "async_pg.py"), "--seconds", "90",
           "--png", str(png)] + (["--naive"] if naive else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"update +1 .* episodes +\d+ +reward .* samples/s", out.stdout)
    done = re.search(r"reward ([\d.]+) \(first 5 updates\) -> ([\d.]+) \(last 5\)", out.stdout)
    assert done, out.stdout[-2000:]
    first, last = float(done.group(1)), float(done.group(2))
    assert last > first + 100, f"the reward did not improve: {first} -> {last}"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("naive", [False, True])
def test_async_sgd_reaches_its_target_accuracy_and_says_where_the_time_went(tmp_path, naive):
    phalanx.shutdown()  # the example starts its own cluster
    cmd = [sys.executable, os.path.join(ROOT, "examples", "train", "async_sgd.py"), "--seconds", "60",
           "--hidden", "256", "--json", "r.json", "--png", "r.png"] + (["--naive"] if naive else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    way = "naive get and sum" if naive else "collective.reduce"
    assert f"2 gradients per update ({way})" in out.stdout
    assert re.search(r"update +\d+ +[\d.]+ updates/s +\d+ samples/s +loss [\d.]+ +test accuracy", out.stdout)
    done = re.search(r"done \(phalanx, [^)]*\): (\d+) updates .* test accuracy ([\d.]+); the server's time: "
                     r"gradients (\d+)%, step (\d+)%, publish (\d+)%", out.stdout)
    assert done, out.stdout[-2000:]
    assert int(done.group(1)) > 10 and float(done.group(2)) >= 0.82, done.group(0)
    assert 98 <= sum(int(done.group(i)) for i in (3, 4, 5)) <= 102
    r = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert r["time_to_target_s"] is not None and r["accuracy"] >= 0.82 and r["updates_per_s"] > 0
    assert r["curve"][-1][1] == r["accuracy"] and r["model_bytes"] == 4 * r["parameters"]
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_data_parallel_reaches_its_target_with_fused_buckets_and_reports_the_figures(tmp_path):
    phalanx.shutdown()  # the example starts its own cluster
    cmd = [sys.executable, os.path.join(ROOT, "examples", "train", "data_parallel.py"), "--ranks", "2",
           "--seconds", "90", "--target", "0.75", "--compression", "fp16", "--json", "r.json", "--png", "r.png"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"model [\d,]+ parameters in 34 tensors, \d+ collectives per step", out.stdout)
    assert re.search(r"link measured: latency [\d.]+ ms", out.stdout)
    r = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert r["time_to_target_s"] is not None and r["accuracy"] >= 0.75, out.stdout[-2000:]
    assert len(r["choices"]) == 34 and {c["codec"] for c in r["choices"]} <= {"none", "fp16"}
    assert r["steps_per_s"] > 0 and r["step_ms"] > 0 and r["bytes_sent_rank0"] > 0
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_data_parallel_rejects_an_unknown_compression(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "examples", "train", "data_parallel.py"), "--compression", "int8"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "--compression must be none, fp16, topk or onebit" in out.stderr
