"""Runtime environments: `runtime_env={"working_dir": DIR, "py_modules": [DIR, module, ...],
"env_vars": {NAME: VALUE}, "excludes": [PATTERN, ...], "worker_process_setup_hook": FUNCTION or
"module.function"}` in `phalanx.init`, in `@phalanx.remote(...)` and `.options()` of tasks and actors,
and for jobs.

How it travels. The submitting process zips each directory (deterministically: entries sorted,
fixed times, so equal contents give equal bytes), registers the zip once in the function table
under the digest of its bytes (content-addressed: the raylet writes it to the GCS for the other
nodes, and a second upload of the same bytes is none), and sends the environment with each task
as `env_vars` sorted by name plus package ids (`_core.runtime_env_pack`; the raylet checks it
again). The raylet starts workers for the task with the env_vars set and PHALANX_RUNTIME_ENV
naming the environment, and keeps them for tasks of that environment alone. The worker
(`setup_worker`) unpacks each package once per node under the session directory (made whole in a
temporary folder, then renamed into place), enters working_dir and puts it and the py_modules
packages first on sys.path.

Tasks and actors inherit the environment of whatever submits them (the driver's from
`init(runtime_env=...)`); `.options(runtime_env=...)` replaces the fields it names, env_vars
merged name by name (Ray's rule). A zip given as working_dir, or read back on a node, with an
entry that would land outside its folder (`../`, an absolute path, a link) is refused, naming
the entry.

worker_process_setup_hook (Ray's): called once in each worker of the environment before its first
task. A function is pickled (cloudpickle) and registered in the function table as packages are; a
"module.function" string is imported on the worker. Either travels as the env var
__PHALANX_WORKER_SETUP_HOOK (so it takes part in which workers an environment's tasks share), which
the worker reads and removes. A hook that fails fails every task and actor of that worker with
RuntimeEnvSetupError ("Failed to execute the setup hook method.", as Ray's), naming the error."""
import fnmatch
import hashlib
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import types
import zipfile

import pathspec

from phalanx import _core
from phalanx._private import remote_package
from phalanx.exceptions import RuntimeEnvSetupError

SUPPORTED = ("working_dir", "py_modules", "env_vars", "excludes", "config", "worker_process_setup_hook")
SETUP_HOOK_ENV = "__PHALANX_WORKER_SETUP_HOOK"  # (not PHALANX_: those are the raylet's own) "module:<module.function>" or "pickled:<package id hex>"
# Ray's fields phalanx does not set up: a clear NotImplementedError names them.
_NOT_SUPPORTED = ("pip", "conda", "uv", "container", "image_uri", "java_jars", "py_executable", "nsight", "mpi")
_DEFAULT_MAX_MB = 100


class PackageTooLarge(RuntimeEnvSetupError, ValueError):
    """A working_dir or py_modules entry over the limit: Ray's RuntimeEnvSetupError (also a ValueError)."""
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_SKIPPED_DIRS = ("__pycache__", ".git")

# The environment of this process's tasks: what a submission without a runtime_env of its own
# carries (b"": none). The driver's is init's; a worker's is the one it was started in.
current = b""


def max_bytes():
    """The most a working_dir or py_modules entry may hold (PHALANX_RUNTIME_ENV_MAX_MB, default 100 MiB)."""
    return int(float(os.environ.get("PHALANX_RUNTIME_ENV_MAX_MB", _DEFAULT_MAX_MB)) * (1 << 20))


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


def check(runtime_env, where):
    """Checks the shape of a runtime_env (before anything is zipped or sent); raises naming what is wrong."""
    if runtime_env is None:
        return
    if not isinstance(runtime_env, dict):
        raise TypeError(f"{where}: runtime_env must be a dict, got {type(runtime_env).__name__}")
    for key in runtime_env:
        if key in _NOT_SUPPORTED:
            raise NotImplementedError(
                f"{where}: runtime_env {key!r} is not supported by phalanx; supported are "
                f"{', '.join(SUPPORTED)}. Install packages into the Python environment of every node "
                f"(the phalanx wheel's virtual environment, or `phalanx up`'s setup commands) instead")
        if key not in SUPPORTED:
            raise ValueError(f"{where}: unknown runtime_env field {key!r}; supported are {', '.join(SUPPORTED)}")
    env_vars = runtime_env.get("env_vars")
    if env_vars is not None:
        if not isinstance(env_vars, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in env_vars.items()):
            raise TypeError(f"{where}: runtime_env env_vars must be a dict of str to str, got {env_vars!r}")
    wd = runtime_env.get("working_dir")
    if wd is not None:
        _check_local(wd, "working_dir", where)
    mods = runtime_env.get("py_modules")
    if mods is not None:
        if not isinstance(mods, (list, tuple)):
            raise TypeError(f"{where}: runtime_env py_modules must be a list, got {type(mods).__name__}")
        for m in mods:
            if not isinstance(m, types.ModuleType):
                _check_local(m, "py_modules", where)
    config = runtime_env.get("config")
    if config is not None:
        from phalanx.runtime_env import RuntimeEnvConfig
        RuntimeEnvConfig.parse(config)  # (raises naming what is wrong; phalanx sets an environment up in time)
    hook = runtime_env.get("worker_process_setup_hook")
    if hook is not None and not (isinstance(hook, str) or callable(hook)):
        raise TypeError(f"{where}: runtime_env worker_process_setup_hook must be a function or a "
                        f"'module.function' string, got {type(hook).__name__}")
    excludes = runtime_env.get("excludes")
    if excludes is not None and (not isinstance(excludes, (list, tuple)) or
                                 not all(isinstance(e, str) for e in excludes)):
        raise TypeError(f"{where}: runtime_env excludes must be a list of patterns, got {excludes!r}")


def _check_local(path, field, where):
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{where}: runtime_env {field} entries must be paths, got {path!r}")
    path = os.fspath(path)
    if package_ref(path) is not None:  # (uploaded already: what get_runtime_context().runtime_env shows)
        return
    if remote_package.is_uri(path):
        remote_package.check(path, field, where)
        return
    if not (os.path.isdir(path) or (os.path.isfile(path) and path.endswith(".zip")) or
            (field == "py_modules" and os.path.isfile(path) and path.endswith(".py"))):
        raise ValueError(f"{where}: runtime_env {field} {path!r} is not a directory or a .zip file here")


def resolve(runtime_env, base=None):
    """The packed environment (bytes for submit_task) of `runtime_env` over `base` (packed; default:
    this process's current one): its packages uploaded. None or {} gives `base`."""
    base = current if base is None else base
    if not runtime_env:
        return base
    check(runtime_env, "runtime_env")
    env_vars, working_dir, py_modules = _core.runtime_env_unpack(base) if base else ([], b"", [])
    merged = dict(env_vars)
    merged.update(runtime_env.get("env_vars") or {})
    if runtime_env.get("worker_process_setup_hook") is not None:
        merged[SETUP_HOOK_ENV] = _export_setup_hook(runtime_env["worker_process_setup_hook"])
    excludes = list(runtime_env.get("excludes") or ())
    if runtime_env.get("working_dir") is not None:
        wd = os.fspath(runtime_env["working_dir"])
        working_dir = package_ref(wd) or upload(wd, excludes, as_module=False)
    if runtime_env.get("py_modules") is not None:
        py_modules = [package_ref(m) or upload(_module_path(m), excludes, as_module=True)
                      for m in runtime_env["py_modules"]]
    return _core.runtime_env_pack(sorted(merged.items()), working_dir, py_modules)


def _export_setup_hook(hook):
    """The PHALANX_WORKER_SETUP_HOOK value of a worker_process_setup_hook (a function registered in the
    function table, pickled; a string as it is)."""
    if isinstance(hook, str):
        return hook if hook.startswith("pickled:") else "module:" + hook  # (pickled: as describe() shows it)
    import cloudpickle
    try:
        data = cloudpickle.dumps(hook)
    except Exception as e:
        raise RuntimeEnvSetupError(f"Failed to export the setup function. worker_process_setup_hook "
                                   f"{getattr(hook, '__qualname__', hook)!r} cannot be pickled: "
                                   f"{type(e).__name__}: {e}") from e
    pid = package_id(data)
    _core.register_function(pid, f"worker_process_setup_hook {getattr(hook, '__qualname__', '')}", data)
    return "pickled:" + pid.hex()


def run_setup_hook():
    """In a worker: calls the environment's worker_process_setup_hook, if it has one (once, before any
    task). Raises RuntimeEnvSetupError saying what failed."""
    value = os.environ.pop(SETUP_HOOK_ENV, "")
    if not value:
        return
    how, _, what = value.partition(":")
    try:
        if how == "module":
            module, _, name = what.rpartition(".")
            if not module:
                raise ValueError(f"{what!r} is not 'module.function'")
            import importlib
            hook = getattr(importlib.import_module(module), name)
        else:
            import cloudpickle
            hook = cloudpickle.loads(_core.get_function(bytes.fromhex(what), 60000)[1])
        hook()
    except Exception as e:
        raise RuntimeEnvSetupError(f"Failed to execute the setup hook method. worker_process_setup_hook "
                                   f"{what if how == 'module' else '(a function)'} raised "
                                   f"{type(e).__name__}: {e}") from e


def merged(outer, inner):
    """`inner` over `outer` (both runtime_env dicts): inner's fields replace outer's, env_vars merged by name."""
    out = dict(outer or {})
    for k, v in (inner or {}).items():
        out[k] = dict(out.get("env_vars") or {}, **v) if k == "env_vars" else v
    return out


def package_ref(path):
    """The id of a package uploaded already, named as describe() names it ("pkg:<hex>"), else None: any task,
    actor or job may give it again (Ray's gcs://_ray_pkg_<hash>.zip)."""
    if not isinstance(path, str) or not path.startswith("pkg:"):
        return None
    try:
        pid = bytes.fromhex(path[4:])
    except ValueError:
        return None
    return pid or None


def describe(packed):
    """A packed environment as a dict (package ids in hex): for errors and `phalanx job status`."""
    if not packed:
        return {}
    env_vars, working_dir, py_modules = _core.runtime_env_unpack(packed)
    out = {}
    env_vars = dict(env_vars)
    hook = env_vars.pop(SETUP_HOOK_ENV, None)
    if hook:  # (the module's name, or "pickled:<id>" for a function: either given again works)
        out["worker_process_setup_hook"] = hook[len("module:"):] if hook.startswith("module:") else hook
    if env_vars:
        out["env_vars"] = env_vars
    if working_dir:
        out["working_dir"] = "pkg:" + working_dir.hex()
    if py_modules:
        out["py_modules"] = ["pkg:" + m.hex() for m in py_modules]
    return out


def _module_path(m):
    if isinstance(m, types.ModuleType):
        paths = list(getattr(m, "__path__", []) or [])
        if paths:
            return paths[0]
        if getattr(m, "__file__", None):
            return m.__file__
        raise ValueError(f"runtime_env py_modules: module {m.__name__} has no file to upload")
    return os.fspath(m)


def package_id(data):
    """A package's id: the digest of its bytes."""
    return hashlib.blake2b(data, digest_size=16, person=b"phalanx-pkg").digest()


_uploaded = {}  # (path, excludes, as_module) -> (what the folder held, package id)


def upload(path, excludes=(), as_module=False):
    """Zips `path` (a directory, a .zip file, or a .py file as a module) and registers it in the
    function table; its id. `as_module`: the directory goes in under its own name (so `import NAME`
    finds it). Zipped again only when a file in it changed. A URI (remote_package.py) is fetched once."""
    if remote_package.is_uri(path):
        hit = _uploaded.get((path, as_module))
        if hit is None:
            data = remote_package.fetch(path, max_bytes())
            _check_zip(data, path)
            if not as_module:
                data = remote_package.without_top_directory(data)
            hit = _uploaded[(path, as_module)] = (None, package_id(data))
            _core.register_function(hit[1], f"runtime_env package {path}", data)
        return hit[1]
    path = os.path.abspath(path)
    key = (path, tuple(excludes), as_module)
    files = None if path.endswith(".zip") else _listing(path, excludes, as_module)
    signature = files and tuple((rel, st.st_size, st.st_mtime_ns) for rel, _, st in files)
    hit = _uploaded.get(key)
    if hit is not None and signature is not None and hit[0] == signature:
        return hit[1]
    pid, data = package(path, excludes, as_module, files)
    _core.register_function(pid, f"runtime_env package {path}", data)  # (once per process and id: the core remembers)
    _uploaded[key] = (signature, pid)
    return pid


def package(path, excludes=(), as_module=False, files=None):
    """(id, zip bytes) of `path` as upload() packs it, without registering it (jobs store it in the GCS)."""
    if remote_package.is_uri(path):
        data = remote_package.fetch(path, max_bytes())
        _check_zip(data, path)
        data = data if as_module else remote_package.without_top_directory(data)
        return package_id(data), data
    path = os.path.abspath(path)
    if path.endswith(".zip") and os.path.isfile(path):
        with open(path, "rb") as f:
            data = f.read()
        _check_zip(data, path)
        return package_id(data), data
    data = _zip(files if files is not None else _listing(path, excludes, as_module))
    return package_id(data), data


def _listing(path, excludes, as_module):
    """[(name in the zip, path here, stat)] of what `path` holds, sorted, within max_bytes()."""
    limit = max_bytes()
    if os.path.isfile(path):  # a single-file module
        st = os.stat(path)
        if st.st_size > limit:
            raise PackageTooLarge(f"runtime_env: {path} is {_mib(st.st_size)}, over the limit of {_mib(limit)} "
                             "(PHALANX_RUNTIME_ENV_MAX_MB)")
        return [(os.path.basename(path), path, st)]
    prefix = os.path.basename(path.rstrip(os.sep)) + "/" if as_module else ""
    out, total = [], 0
    ignores = _Gitignores(path)
    for root, dirs, names in os.walk(path):
        rel_root = os.path.relpath(root, path)
        rel_root = "" if rel_root == "." else rel_root.replace(os.sep, "/") + "/"
        ignores.enter(rel_root, names)
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not _excluded(rel_root + d, excludes) and
                         not ignores.ignored(rel_root + d + "/"))
        for name in sorted(names):
            rel = rel_root + name
            if _excluded(rel, excludes) or ignores.ignored(rel):
                continue
            full = os.path.join(root, name)
            try:
                st = os.stat(full)  # (a link is packed as what it points to)
            except OSError:
                continue  # (a dangling link)
            if not stat.S_ISREG(st.st_mode):
                continue
            total += st.st_size
            out.append((prefix + rel, full, st))
    if total > limit:
        raise PackageTooLarge(f"runtime_env: {path} holds {_mib(total)}, over the limit of {_mib(limit)} "
                         "(PHALANX_RUNTIME_ENV_MAX_MB); leave files out with runtime_env 'excludes': [pattern, ...]")
    out.sort(key=lambda e: e[0])
    return out


def _excluded(rel, excludes):
    """Whether `excludes` leaves out `rel` (relative to the package's folder): a pattern matching its path
    or name (fnmatch), or matching it as a .gitignore line would (Ray's excludes are gitignore patterns)."""
    if any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(os.path.basename(rel), p) for p in excludes):
        return True
    return bool(excludes) and _spec(tuple(excludes)).match_file(rel)


_specs = {}


def _spec(lines):
    spec = _specs.get(lines)
    if spec is None:
        spec = _specs[lines] = pathspec.GitIgnoreSpec.from_lines(lines)
    return spec


class _Gitignores:
    """The .gitignore files of a folder being packed, as Ray honours them: each one's patterns apply to what
    lies under its own folder. PHALANX_RUNTIME_ENV_IGNORE_GITIGNORE=1 (or Ray's
    RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1) packs what they name too."""

    def __init__(self, top):
        self._top = top
        self._off = any(os.environ.get(v) == "1" for v in ("PHALANX_RUNTIME_ENV_IGNORE_GITIGNORE",
                                                           "RAY_RUNTIME_ENV_IGNORE_GITIGNORE"))
        self._specs = []  # (folder relative to top, ending in "/" or "", its spec)

    def enter(self, rel_root, names):
        """os.walk reached `rel_root`, holding files `names`."""
        if self._off or ".gitignore" not in names:
            return
        try:
            with open(os.path.join(self._top, rel_root, ".gitignore"), encoding="utf-8", errors="replace") as f:
                self._specs.append((rel_root, pathspec.GitIgnoreSpec.from_lines(f.read().splitlines())))
        except OSError:
            pass

    def ignored(self, rel):
        """Whether a .gitignore above `rel` (a file, or a folder ending in "/") leaves it out."""
        return any(rel.startswith(folder) and spec.match_file(rel[len(folder):]) for folder, spec in self._specs)


def _zip(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name, full, st in files:
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.external_attr = ((st.st_mode & 0o755) | 0o644 | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(full, "rb") as f:
                z.writestr(info, f.read())
    return buf.getvalue()


def _unsafe_entry(info):
    """Why a zip entry would land outside its folder (or is not a plain file or folder), or None."""
    name = info.filename
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:([/\\]|$)", name):  # (a drive: C:/x; not a:b)
        return "an absolute path"
    if ".." in parts:
        return "a path that climbs out of the folder ('..')"
    kind = (info.external_attr >> 16) & 0o170000
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        return "a link or special file"
    return None


def _check_zip(data, where):
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise ValueError(f"runtime_env: {where} is not a zip file: {e}") from None
    limit, total = max_bytes(), 0
    with z:
        for info in z.infolist():
            why = _unsafe_entry(info)
            if why:
                raise ValueError(f"runtime_env: {where}: entry {info.filename!r} is {why}; refused "
                                 "(a package unpacks only inside its own folder)")
            total += info.file_size
        if total > limit:
            raise PackageTooLarge(f"runtime_env: {where} unpacks to {_mib(total)}, over the limit of {_mib(limit)} "
                             "(PHALANX_RUNTIME_ENV_MAX_MB)")


def _unpack(data, into):
    """Writes zip `data` under `into`, refusing (before anything is written) an entry outside it."""
    _check_zip(data, "a package")
    limit, written = max_bytes(), 0
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            target = os.path.join(into, *[p for p in info.filename.replace("\\", "/").split("/") if p])
            if info.is_dir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    written += len(chunk)
                    if written > limit:  # (sizes the zip states are not trusted)
                        raise ValueError(f"runtime_env: a package unpacks past the limit of {_mib(limit)}")
                    dst.write(chunk)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode | 0o600)


def unpacked(pid, root, fetch=None):
    """The folder package `pid` is unpacked in under `root`: fetched (`fetch(pid)`, default from the
    function table) and unpacked by the first worker of the node that needs it; the others find it
    whole (it is renamed into place once complete)."""
    final = os.path.join(root, "pkg-" + pid.hex())
    if os.path.isdir(final):
        return final
    os.makedirs(root, mode=0o700, exist_ok=True)
    data = fetch(pid) if fetch is not None else _core.get_function(pid, 60000)[1]
    if package_id(data) != pid:
        raise ValueError(f"runtime_env: package {pid.hex()} does not hold the bytes its id names")
    tmp = tempfile.mkdtemp(prefix=".unpacking-", dir=root)
    try:
        _unpack(data, tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not os.path.isdir(final):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def setup_worker():
    """In a worker the raylet started for an environment (PHALANX_RUNTIME_ENV): unpacks its
    packages, enters working_dir and puts the packages on sys.path. Raises what went wrong."""
    global current
    packed = bytes.fromhex(os.environ.get("PHALANX_RUNTIME_ENV", ""))
    if not packed:
        return
    current = packed
    _, working_dir, py_modules = _core.runtime_env_unpack(packed)
    root = os.path.join(os.environ.get("PHALANX_SESSION_DIR") or tempfile.gettempdir(), "runtime_resources")
    for pid in reversed(py_modules):
        sys.path.insert(0, unpacked(pid, root))
    if working_dir:
        wd = unpacked(working_dir, root)
        os.chdir(wd)
        sys.path.insert(0, wd)
