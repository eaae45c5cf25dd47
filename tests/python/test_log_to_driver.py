"""What tasks and actors print reaches the driver that owns the work (Ray's log_to_driver): prefixed with
the function or actor class and pid, stderr to stderr, from any node, repeated lines counted, and off with
init(log_to_driver=False). The worker's log file keeps it either way."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

import phalanx
from conftest import wait_until
from phalanx._private.log_stream import Deduplicator


def _run_driver(tmp_path, body):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)


def test_a_tasks_and_an_actors_prints_reach_the_driver_with_rays_prefix(tmp_path):
    out = _run_driver(tmp_path, """
        import os, sys
        import phalanx
        phalanx.init(num_cpus=2)

        @phalanx.remote
        def say(word):
            print("task says", word)
            print("task warns", word, file=sys.stderr)
            return os.getpid()

        @phalanx.remote
        class Talker:
            def __init__(self):
                print("actor made")

            def talk(self):
                print("actor talks", end="")
                print(" in two writes")
                return os.getpid()

        pid = phalanx.get(say.remote("hello"))
        t = Talker.remote()
        apid = phalanx.get(t.talk.remote())
        print("PIDS", pid, apid)
        phalanx.shutdown()
    """)
    assert out.returncode == 0, out.stderr
    pids = next(line for line in out.stdout.splitlines() if line.startswith("PIDS")).split()
    pid, apid = pids[1], pids[2]
    assert f"(say pid={pid}) task says hello" in out.stdout, out.stdout
    assert f"(say pid={pid}) task warns hello" in out.stderr, out.stderr
    assert f"(say pid={pid}) task warns" not in out.stdout
    assert f"(Talker pid={apid}) actor made" in out.stdout, out.stdout
    assert f"(Talker pid={apid}) actor talks in two writes" in out.stdout, out.stdout


def test_log_to_driver_false_prints_nothing_and_the_log_file_keeps_it(tmp_path):
    out = _run_driver(tmp_path, """
        import phalanx
        info = phalanx.init(num_cpus=1, log_to_driver=False)

        @phalanx.remote
        def say():
            print("quiet marker 7f3a")
            return 1

        phalanx.get(say.remote())
        print("SESSION", info["session_dir"])
        phalanx.shutdown()
    """)
    assert out.returncode == 0, out.stderr
    assert "quiet marker 7f3a" not in out.stdout + out.stderr
    session = next(line for line in out.stdout.splitlines() if line.startswith("SESSION")).split()[1]
    logs = "".join(open(p, errors="replace").read() for p in glob.glob(f"{session}/logs/worker-*.log"))
    assert "quiet marker 7f3a" in logs


def test_prints_from_another_nodes_worker_reach_the_driver(tmp_path):
    out = _run_driver(tmp_path, """
        import os
        import phalanx
        phalanx.init(num_cpus=1, num_nodes=2)

        @phalanx.remote(resources={"node:1": 1})
        def far():
            print("from node one")
            return os.getpid(), phalanx.get_runtime_context().get_node_id()

        pid, node = phalanx.get(far.remote())
        assert node != phalanx.get_node_id()
        print("PID", pid)
        phalanx.shutdown()
    """)
    assert out.returncode == 0, out.stderr
    pid = next(line for line in out.stdout.splitlines() if line.startswith("PID")).split()[1]
    assert f"(far pid={pid}) from node one" in out.stdout, out.stdout


def test_lines_repeated_by_several_workers_are_printed_once_then_counted(cluster, capsys):
    gate = _Gate.remote()

    @phalanx.remote(num_cpus=0.5)
    def chatty(g, k):
        phalanx.get(g.arrive.remote())
        while not phalanx.get(g.is_open.remote()):
            pass
        print(f"loading shard {k} of dataset")
        return os.getpid()

    refs = [chatty.remote(gate, k) for k in range(4)]
    wait_until(lambda: phalanx.get(gate.arrived.remote()) == 4, what="four tasks running at once")
    gate.open.remote()
    assert len(set(phalanx.get(refs))) == 4  # four processes print alike
    seen = []

    def text():
        seen.append(capsys.readouterr().out)
        return "".join(seen)

    # Printed once, then counted; the count comes once the 5 s window ends.
    wait_until(lambda: "across cluster]" in text(), timeout=30, what="the count of repeats")
    lines = [line for line in text().splitlines() if "loading shard" in line]
    firsts = [line for line in lines if "repeated" not in line]
    repeats = [line for line in lines if "repeated" in line]
    assert len(firsts) == 1 and len(repeats) == 1, lines
    assert repeats[0].endswith("of dataset [repeated 3x across cluster]"), repeats


@phalanx.remote(num_cpus=0)
class _Gate:
    def __init__(self):
        self.opened = False
        self.n = 0

    def arrive(self):
        self.n += 1

    def arrived(self):
        return self.n

    def open(self):
        self.opened = True

    def is_open(self):
        return self.opened


def test_the_deduplicator_follows_rays_rule():
    now = [0.0]
    d = Deduplicator(window_s=5.0, clock=lambda: now[0])
    assert d.take("(f pid=1)", 1, "step 1 done", False) == [("(f pid=1)", "step 1 done", False)]
    assert d.take("(f pid=1)", 1, "step 2 done", False) == [("(f pid=1)", "step 2 done", False)]  # same process
    assert d.take("(f pid=2)", 2, "step 3 done", False) == []  # another process: counted
    assert d.take("(f pid=3)", 3, "step 4 done", False) == []
    assert d.take("(f pid=3)", 3, "other news", False) == [("(f pid=3)", "other news", False)]
    assert d.take("(f pid=3)", 3, "42", False) == [("(f pid=3)", "42", False)]  # only numbers: never a repeat
    assert d.due() == []
    now[0] = 5.0
    assert d.due() == [("(f pid=3)", "step 4 done [repeated 2x across cluster]", False)]
    assert d.take("(f pid=2)", 2, "step 9 done", False) == [("(f pid=2)", "step 9 done", False)]  # a new window


def test_a_task_printing_a_lot_is_not_slowed_or_failed_and_every_line_arrives(cluster, capsys):
    @phalanx.remote
    def loud():
        for i in range(2000):
            print("x" * 100, i)
        print("no newline at the end", end="")
        sys.stdout.flush()
        return "done"

    assert phalanx.get(loud.remote(), timeout=60) == "done"
    seen = []
    # (read here, inside the test's capture: printed after it, the lines would fill the CI log)
    wait_until(lambda: seen.append(capsys.readouterr().out) or "no newline at the end" in "".join(seen),
               what="the last line")
    assert len([line for line in "".join(seen).splitlines() if "xxxxxxxxxx" in line]) == 2000


def test_a_tasks_tqdm_ray_bar_is_shown_by_the_driver_as_progress_not_json(tmp_path):
    out = _run_driver(tmp_path, """
        import os
        import phalanx
        from phalanx.experimental.tqdm_ray import tqdm
        phalanx.init(num_cpus=1)

        @phalanx.remote
        def work(n):
            bar = tqdm(total=n, desc="work", flush_interval_s=0)
            for _ in range(n):
                bar.update(1)
            bar.close()
            return os.getpid()

        print("PID", phalanx.get(work.remote(4)))
        for _ in tqdm(range(3), desc="here"):
            pass
        phalanx.shutdown()
    """)
    assert out.returncode == 0, out.stderr
    pid = next(line for line in out.stdout.splitlines() if line.startswith("PID")).split()[1]
    assert f"(work pid={pid}) work:  50%|#####     | 2/4 it" in out.stderr, out.stderr
    assert f"(work pid={pid}) work: 100%|##########| 4/4 it (done)" in out.stderr, out.stderr
    assert "__ray_tqdm_magic_token__" not in out.stdout + out.stderr
    assert "here: 100%|##########| 3/3 it" in out.stderr, out.stderr  # (a driver's bar: printed there)
