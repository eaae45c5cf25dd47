"""Runtime environments (`runtime_env`): working_dir, py_modules and env_vars in init, in tasks' and
actors' options, inherited by nested tasks; packages stored once (content-addressed) and unpacked once
per node; workers of an environment kept for it; bad input refused with a clear error, nothing written
outside a package's folder."""
import os
import sys
import zipfile

import pytest

import phalanx
from phalanx import _core
from phalanx._private import runtime_env
from phalanx.exceptions import RuntimeEnvSetupError


def _tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return str(root)


@phalanx.remote
def _where():
    import helper
    with open("data.txt") as f:
        data = f.read()
    return os.getcwd(), data, helper.X, os.environ.get("A"), os.environ.get("B"), os.getpid()


def test_a_jobs_working_dir_and_env_vars_reach_its_tasks_actors_and_their_children(fresh_cluster, tmp_path):
    wd = _tree(tmp_path / "wd", {"data.txt": "hello", "helper.py": "X = 41\n"})
    here = os.getcwd()
    info = fresh_cluster(runtime_env={"working_dir": wd, "env_vars": {"A": "job"}})
    cwd, data, x, a, b, _ = phalanx.get(_where.remote(), timeout=60)
    assert (data, x, a, b) == ("hello", 41, "job", None)
    assert cwd.startswith(os.path.join(info["session_dir"], "runtime_resources", "pkg-"))
    assert os.getcwd() == here  # (the driver stays where it is)
    # A task's own env_vars are merged into the job's, name by name.
    _, _, _, a, b, _ = phalanx.get(_where.options(runtime_env={"env_vars": {"B": "task"}}).remote(), timeout=60)
    assert (a, b) == ("job", "task")

    @phalanx.remote
    def parent():
        return phalanx.get(_where.remote())  # (inherits the parent's environment)

    _, _, _, a, b, _ = phalanx.get(parent.options(runtime_env={"env_vars": {"A": "parent"}}).remote(), timeout=60)
    assert (a, b) == ("parent", None)

    @phalanx.remote
    class Actor:
        def where(self):
            return os.getcwd(), os.environ.get("A"), os.path.exists("data.txt")

    actor = Actor.options(runtime_env={"env_vars": {"A": "actor"}}).remote()
    cwd_a, a, found = phalanx.get(actor.where.remote(), timeout=60)
    assert (cwd_a, a, found) == (cwd, "actor", True)


def test_py_modules_of_directories_and_module_objects_are_importable(fresh_cluster, tmp_path):
    mods = _tree(tmp_path / "mods", {"mymod/__init__.py": "def f():\n    return 'mymod'\n",
                                      "single.py": "VALUE = 'single'\n"})
    fresh_cluster()
    sys.path.insert(0, mods)
    try:
        import single
    finally:
        sys.path.remove(mods)

    @phalanx.remote
    def use():
        import mymod
        import single as s
        return mymod.f(), s.VALUE

    env = {"py_modules": [os.path.join(mods, "mymod"), single]}
    assert phalanx.get(use.options(runtime_env=env).remote(), timeout=60) == ("mymod", "single")


def test_a_package_is_stored_by_its_contents_and_unpacked_once_per_node(fresh_cluster, tmp_path):
    files = {"data.txt": "same", "helper.py": "X = 1\n", "sub/deep.txt": "d"}
    one = _tree(tmp_path / "one", files)
    two = _tree(tmp_path / "two", files)
    os.utime(os.path.join(two, "data.txt"), (1, 1))  # (times do not change a package)
    info = fresh_cluster(num_nodes=2)
    assert runtime_env.upload(one) == runtime_env.upload(two)

    @phalanx.remote(num_cpus=0)
    def where():
        return os.getcwd(), os.getpid()

    runs = []
    for node in (0, 1):
        for path in (one, two):
            env = {"working_dir": path, "env_vars": {"NODE": str(node)}}
            runs.append(phalanx.get(where.options(runtime_env=env, resources={f"node:{node}": 1}).remote(),
                                    timeout=60))
    assert len({cwd for cwd, _ in runs}) == 1
    root = os.path.join(info["session_dir"], "runtime_resources")
    assert [n for n in os.listdir(root) if n.startswith("pkg-")] == [os.path.basename(runs[0][0])]
    assert not [n for n in os.listdir(root) if n.startswith(".unpacking-")]  # (nothing half-made left)


def test_workers_of_other_environments_make_room_on_a_full_node(fresh_cluster):
    fresh_cluster(num_cpus=1)

    @phalanx.remote
    def env_of(_):
        return os.environ.get("K"), os.getpid()

    plain = phalanx.get([env_of.remote(i) for i in range(4)], timeout=60)
    assert {k for k, _ in plain} == {None}
    seen = {}
    for round_ in range(2):
        for k in ("a", "b", "c"):
            got = phalanx.get([env_of.options(runtime_env={"env_vars": {"K": k}}).remote(i) for i in range(3)],
                              timeout=60)
            assert {v for v, _ in got} == {k}
            seen.setdefault(k, set()).update(pid for _, pid in got)
    assert not set.intersection(*seen.values())  # (a worker serves one environment only)
    assert phalanx.get(env_of.remote(0), timeout=60)[0] is None


@pytest.mark.parametrize("env, error, words", [
    ({"pip": ["requests"]}, NotImplementedError, ["'pip' is not supported", "working_dir, py_modules, env_vars"]),
    ({"conda": "base"}, NotImplementedError, ["'conda' is not supported"]),
    ({"colour": 1}, ValueError, ["unknown runtime_env field 'colour'"]),
    ({"env_vars": {"A": 1}}, TypeError, ["dict of str to str"]),
    ({"working_dir": "s3://bucket/code.zip"}, ValueError, ["'s3' protocol is not supported", "https://"]),
    ({"working_dir": "https://example.invalid/code.tar"}, ValueError, ["only .zip files are supported"]),
    ({"working_dir": "/no/such/dir"}, ValueError, ["'/no/such/dir' is not a directory"]),
    ("not a dict", TypeError, ["must be a dict"]),
])
def test_unsupported_or_malformed_environments_are_refused_at_options(env, error, words):
    @phalanx.remote
    def f():
        return 1

    for make in (lambda: f.options(runtime_env=env),
                 lambda: phalanx.remote(runtime_env=env)(lambda: 1),
                 lambda: phalanx.remote(type("C", (), {})).options(runtime_env=env)):
        with pytest.raises(error) as e:
            make()
        for w in words:
            assert w in str(e.value)


def test_reserved_variables_and_oversized_directories_are_refused(fresh_cluster, tmp_path, monkeypatch):
    fresh_cluster()

    @phalanx.remote
    def f():
        return 1

    with pytest.raises(ValueError, match="PHALANX_WORKER_TOKEN is phalanx's own"):
        f.options(runtime_env={"env_vars": {"PHALANX_WORKER_TOKEN": "x"}}).remote()
    big = _tree(tmp_path / "big", {"a.bin": "x" * 300_000, "b.bin": "y" * 300_000})
    monkeypatch.setenv("PHALANX_RUNTIME_ENV_MAX_MB", "0.5")
    with pytest.raises(ValueError) as e:
        f.options(runtime_env={"working_dir": big}).remote()
    assert "holds 0.6 MiB, over the limit of 0.5 MiB" in str(e.value)
    # Leaving the large files out makes it fit.
    env = {"working_dir": big, "excludes": ["*.bin"], "env_vars": {"K": "small"}}
    assert phalanx.get(f.options(runtime_env=env).remote(), timeout=60) == 1
    with pytest.raises(ValueError, match="unknown runtime_env field"):
        phalanx.init(runtime_env={"bogus": 1}, ignore_reinit_error=True)


def _evil_zip(path, escape):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ok.txt", "fine")
        z.writestr(escape, "bad")
    return str(path)


def test_a_zip_with_entries_outside_its_folder_is_refused_naming_the_entry(fresh_cluster, tmp_path):
    fresh_cluster()

    @phalanx.remote
    def f():
        return 1

    for escape in ("../../escape.txt", "/tmp/absolute.txt", "a/../../up.txt"):
        zpath = _evil_zip(tmp_path / "evil.zip", escape)
        with pytest.raises(ValueError) as e:
            f.options(runtime_env={"working_dir": zpath}).remote()
        assert repr(escape) in str(e.value) and "refused" in str(e.value)


@pytest.mark.parametrize("name,why", [
    ("../x", "climbs out"), ("a/../../x", "climbs out"), ("a\\..\\..\\x", "climbs out"),
    ("/etc/passwd", "absolute"), ("\\x", "absolute"), ("C:/x", "absolute"), ("c:\\x", "absolute"), ("C:", "absolute"),
    ("a:b", None), ("dir/a:b.txt", None), ("..hidden/x", None), ("x..y", None)])
def test_zip_entries_are_judged_by_where_they_would_land(name, why):
    info = zipfile.ZipInfo(name)
    info.external_attr = 0o100644 << 16
    got = runtime_env._unsafe_entry(info)
    assert (got is None) if why is None else (why in got), got
    link = zipfile.ZipInfo("link")
    link.external_attr = 0o120777 << 16
    assert runtime_env._unsafe_entry(link) == "a link or special file"


def test_a_package_a_node_cannot_unpack_fails_its_tasks_with_the_reason_and_writes_nothing_outside(
        fresh_cluster, tmp_path):
    info = fresh_cluster()
    root = os.path.join(info["session_dir"], "runtime_resources")

    @phalanx.remote
    def f():
        return 1

    # A package registered behind the driver's checks (as a peer with the token could), with an
    # entry that climbs out: the worker refuses it before writing anything.
    with open(_evil_zip(tmp_path / "evil.zip", "../escaped.txt"), "rb") as z:
        data = z.read()
    pid = runtime_env.package_id(data)
    _core.register_function(pid, "evil", data)
    before = runtime_env.current
    try:
        runtime_env.current = _core.runtime_env_pack([], pid, [])
        with pytest.raises(RuntimeEnvSetupError) as e:
            phalanx.get(f.remote(), timeout=60)
        assert "'../escaped.txt'" in str(e.value)
        assert not os.path.exists(os.path.join(root, "escaped.txt"))
        assert not os.path.exists(os.path.join(os.path.dirname(root), "escaped.txt"))
        # A package nobody registered: the reason names it.
        runtime_env.current = _core.runtime_env_pack([], b"\x07" * 16, [])
        with pytest.raises(RuntimeEnvSetupError) as e:
            phalanx.get(f.remote(), timeout=60)
        assert "07070707" in str(e.value)
    finally:
        runtime_env.current = before
    assert phalanx.get(f.remote(), timeout=60) == 1  # (other environments unaffected)


# ---- issue 55: a worker of an environment serves the next task of it; .gitignore; URIs ----

def test_a_worker_set_up_for_an_environment_serves_the_next_task_asking_for_it(fresh_cluster):
    fresh_cluster(num_cpus=1)

    @phalanx.remote
    def pid():
        return os.getpid(), os.environ.get("K")

    f = pid.options(runtime_env={"env_vars": {"K": "v"}})
    first = phalanx.get(f.remote(), timeout=60)
    assert first[1] == "v"
    again = [phalanx.get(pid.options(runtime_env={"env_vars": {"K": "v"}}).remote(), timeout=60) for _ in range(5)]
    assert {p for p, _ in again} == {first[0]}  # the same process, not one started per task


def test_a_working_dirs_gitignore_files_are_honoured_as_rays(fresh_cluster, tmp_path, monkeypatch):
    root = _tree(tmp_path / "wd", {
        ".gitignore": "*.ckpt\n/build/\n!keep.ckpt\n",
        "main.py": "x = 1\n", "model.ckpt": "big", "keep.ckpt": "small", "build/out.o": "obj",
        "sub/.gitignore": "local.txt\n", "sub/local.txt": "no", "sub/other.txt": "yes", "sub/build/x": "nested",
    })
    files = {rel for rel, _, _ in runtime_env._listing(root, [], False)}
    assert files == {".gitignore", "main.py", "keep.ckpt", "sub/.gitignore", "sub/other.txt", "sub/build/x"}
    monkeypatch.setenv("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "1")  # Ray's switch packs them all
    assert "model.ckpt" in {rel for rel, _, _ in runtime_env._listing(root, [], False)}
    monkeypatch.delenv("RAY_RUNTIME_ENV_IGNORE_GITIGNORE")
    fresh_cluster(num_cpus=1)

    @phalanx.remote
    def listing():
        return sorted(os.listdir(".")), sorted(os.listdir("sub"))

    top, sub = phalanx.get(listing.options(runtime_env={"working_dir": root}).remote(), timeout=60)
    assert "model.ckpt" not in top and "build" not in top and "keep.ckpt" in top
    assert "local.txt" not in sub and "other.txt" in sub


def test_a_remote_working_dir_is_fetched_or_refused_with_rays_value_error(fresh_cluster, tmp_path):
    import http.server
    import socket
    import threading
    pkg = tmp_path / "pkg.zip"
    with zipfile.ZipFile(pkg, "w") as z:  # one top-level folder, as Ray asks of a remote working_dir
        z.writestr("project/data.txt", "fetched")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fresh_cluster(num_cpus=1)

    @phalanx.remote
    def read():
        with open("data.txt") as f:
            return f.read()

    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/pkg.zip"
        assert phalanx.get(read.options(runtime_env={"working_dir": url}).remote(), timeout=60) == "fetched"
        with pytest.raises(ValueError, match="cannot be fetched"):
            read.options(runtime_env={"working_dir": url.replace("pkg.zip", "missing.zip")}).remote()
    finally:
        server.shutdown()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(ValueError, match=f"'http://127.0.0.1:{closed}/x.zip' cannot be fetched"):
        read.options(runtime_env={"working_dir": f"http://127.0.0.1:{closed}/x.zip"}).remote()


def test_a_setup_hook_runs_once_per_worker_before_its_tasks_and_children_inherit_it(fresh_cluster):
    def hook():
        os.environ["HOOKED"] = str(os.getpid())
        os.environ["HOOK_CALLS"] = str(int(os.environ.get("HOOK_CALLS", "0")) + 1)

    fresh_cluster(num_cpus=1, runtime_env={"worker_process_setup_hook": hook})

    @phalanx.remote
    def seen():
        return os.environ.get("HOOKED"), int(os.environ.get("HOOK_CALLS", "0")), \
            phalanx.get_runtime_context().runtime_env

    @phalanx.remote
    def parent():
        return phalanx.get(seen.remote())

    pid, calls, env = phalanx.get(seen.remote())
    assert pid is not None and calls == 1
    assert phalanx.get(seen.remote())[:2] == (pid, 1)  # the same worker: the hook ran once there
    # The environment names the hook (not as one of its variables) and a child's worker runs it too.
    assert env["worker_process_setup_hook"].startswith("pickled:") and "env_vars" not in env
    assert phalanx.get(parent.remote())[1] == 1
    assert phalanx.get_runtime_context().runtime_env == env


def test_a_setup_hook_that_fails_fails_the_tasks_of_its_worker_naming_the_error(fresh_cluster):
    def hook():
        raise ValueError("no GPU driver here")

    fresh_cluster(num_cpus=1, runtime_env={"worker_process_setup_hook": hook})
    with pytest.raises(RuntimeEnvSetupError, match="Failed to execute the setup hook method.*no GPU driver here"):
        phalanx.get(phalanx.remote(lambda: 1).remote(), timeout=60)
    with pytest.raises(TypeError, match="worker_process_setup_hook"):
        phalanx.remote(lambda: 1).options(runtime_env={"worker_process_setup_hook": 3})
