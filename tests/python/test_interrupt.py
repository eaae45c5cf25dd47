"""Ctrl-C reaches a driver blocked in get, and the embedded cluster goes
away with the driver."""
import os
import signal
import subprocess
import sys
import textwrap
import time

DRIVER = textwrap.dedent("""
    import sys, time, phalanx
    info = phalanx.init(num_cpus=1)
    print(info["session_dir"], flush=True)

    @phalanx.remote
    def forever():
        time.sleep(600)

    ref = forever.remote()
    print("waiting", flush=True)
    try:
        phalanx.get(ref)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
""")


def _driver():
    # Ctrl-C as at a terminal: a shell that runs the tests in the background
    # starts them with SIGINT ignored, which the driver would inherit (and then
    # Python installs no KeyboardInterrupt handler).
    return subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _pids_of_session(session_dir):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{d}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if session_dir.encode() in cmdline or f"PHALANX_SESSION_DIR={session_dir}".encode() in environ:
            pids.append(int(d))
    return pids


def test_ctrl_c_interrupts_get_and_cluster_stops():
    p = _driver()
    session = p.stdout.readline().strip()
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=20)
    assert "interrupted" in out and p.returncode == 3
    deadline = time.monotonic() + 10
    while _pids_of_session(session) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pids_of_session(session) == [], "raylet or redis-server outlived the driver"


def test_killed_driver_takes_its_embedded_cluster_along():
    p = _driver()
    session = p.stdout.readline().strip()
    assert p.stdout.readline().strip() == "waiting"
    assert _pids_of_session(session), "the cluster should be running"
    def running():  # (a worker's title names the task it runs, as Ray's: ray::forever)
        for pid in _pids_of_session(session):
            try:
                if open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"ray::forever"):
                    return True
            except OSError:
                pass
        return False
    deadline = time.monotonic() + 30
    while not running():
        assert time.monotonic() < deadline, "a worker should be running the task"
        time.sleep(0.05)
    p.kill()
    p.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _pids_of_session(session) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pids_of_session(session) == [], "raylet, workers or redis-server outlived a killed driver"


ALARM_DRIVER = textwrap.dedent("""
    import signal, time, phalanx
    phalanx.init(num_cpus=1)

    class Deadline(Exception):
        pass

    def on_alarm(signum, frame):
        raise Deadline("the handler's own error")

    @phalanx.remote
    def forever():
        time.sleep(600)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        phalanx.get(forever.remote())
    except Deadline as e:
        print("deadline:", e, flush=True)
    except KeyboardInterrupt:
        print("keyboard interrupt", flush=True)
    # The wait after it is an ordinary one again.
    try:
        phalanx.get(forever.remote(), timeout=0.2)
    except phalanx.exceptions.GetTimeoutError:
        print("timeout", flush=True)
    phalanx.shutdown()
""")


def test_a_signal_handlers_exception_comes_out_of_get_as_raised():
    # pytest-timeout's SIGALRM handler fails the test this way; a KeyboardInterrupt
    # in its place ended the whole pytest run.
    out = subprocess.run([sys.executable, "-c", ALARM_DRIVER], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == ["deadline: the handler's own error", "timeout"], out.stdout + out.stderr
