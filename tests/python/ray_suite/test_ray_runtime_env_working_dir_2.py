"""Ray's `python/ray/tests/test_runtime_env_working_dir_2.py` (ray-project/ray), through `import ray` only:
child tasks and actors inheriting the job's working_dir or py_modules, the package size limit, the driver's
upload messages, two environments sharing one package, and files dated before 1980. Each test is named after
Ray's test it follows and checks what it checks.

Changed: Ray's conftest fixtures `start_cluster` (without its Ray Client parameter) and `tmp_working_dir` are
written here, and Ray's `chdir` test helper; `GCS_STORAGE_MAX_SIZE` (`ray._private.runtime_env.packaging`) is
its value, 512 MiB, written out; `test_inheritance` leaves out its middle part, which passes a package on S3
(`s3://runtime-env-test/...`: needs AWS credentials and the internet); `test_concurrent_downloads` uploads its
folder through `ray.init(runtime_env={"working_dir": DIR})` and takes the package's URI from
`ray.get_runtime_context().runtime_env["working_dir"]` instead of Ray's private `get_uri_for_directory` /
`upload_package_if_needed`, then runs its two tasks (two environments with that URI) as Ray's does.

Left out: all of `test_runtime_env_working_dir_3.py` (whose portable tests were to join this file): its tests
(TestGC's, `test_hit_cache_size_limit`, `test_pin_runtime_env_uri`) check the garbage collection of packages
through `ray.experimental.internal_kv` and each node's private runtime_env folder, most with an S3 package."""
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

import ray
from ray.exceptions import RuntimeEnvSetupError
from suite_utils import phalanx_differs, run_string_as_driver

GCS_STORAGE_MAX_SIZE = 512 * 1024 * 1024  # Ray's ray._private.runtime_env.packaging.GCS_STORAGE_MAX_SIZE


@contextmanager
def chdir(d):
    """Ray's test helper of this name (ray._private.test_utils)."""
    old = os.getcwd()
    os.chdir(d)
    try:
        yield
    finally:
        os.chdir(old)


@pytest.fixture
def start_cluster(ray_start_cluster):
    """Ray's conftest fixture of this name (without Ray Client): a cluster of one 4-CPU node, not connected."""
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=4)
    yield cluster, cluster.address


@pytest.fixture
def tmp_working_dir():
    """Ray's conftest fixture of this name."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        path = Path(tmp_dir)
        (path / "hello").write_text("world")
        (path / "file_module.py").write_text("def hello():\n    return 'hello'\n")
        module_path = path / "test_module"
        module_path.mkdir(parents=True)
        (module_path / "test.py").write_text("def one():\n    return 1\n")
        (module_path / "__init__.py").write_text("from test_module.test import one\n")
        yield tmp_dir


@pytest.mark.parametrize("option", ["working_dir", "py_modules"])
@phalanx_differs("ray.get_runtime_context().runtime_env raises ValueError when the job has a working_dir or "
                 "py_modules (RuntimeEnv(**describe()) re-checks \"pkg:<hex>\" as a local path); past that, phalanx "
                 "takes a local directory in .options(runtime_env=...) of a task or actor (uploads it), where Ray "
                 "raises ValueError (a local path is for the job's runtime_env only)")
def test_inheritance(start_cluster, option: str):
    """Tests that child tasks/actors inherit URIs properly."""
    cluster, address = start_cluster
    with tempfile.TemporaryDirectory() as tmpdir, chdir(tmpdir):
        with open("hello", "w") as f:
            f.write("world")

        if option == "working_dir":
            ray.init(address, runtime_env={"working_dir": "."})
        elif option == "py_modules":
            ray.init(address, runtime_env={"py_modules": ["."]})

        @ray.remote
        def get_env():
            return ray.get_runtime_context().runtime_env

        @ray.remote
        class EnvGetter:
            def get(self):
                return ray.get_runtime_context().runtime_env

        job_env = ray.get_runtime_context().runtime_env
        assert ray.get(get_env.remote()) == job_env
        eg = EnvGetter.remote()
        assert ray.get(eg.get.remote()) == job_env

        # (Ray's "Passing a new URI should work" with an S3 package: left out, see the header.)

        # Passing a local directory should not work.
        if option == "working_dir":
            env = {"working_dir": "."}
        elif option == "py_modules":
            env = {"py_modules": ["."]}
        with pytest.raises(ValueError):
            get_env.options(runtime_env=env).remote()
        with pytest.raises(ValueError):
            EnvGetter.options(runtime_env=env).remote()


@pytest.mark.parametrize("option", ["working_dir", "py_modules"])
@phalanx_differs("a package over PHALANX_RUNTIME_ENV_MAX_MB (100 MiB) is refused (ValueError at ray.init, "
                 "runtime_env._listing); Ray takes packages up to 512 MiB (GCS_STORAGE_MAX_SIZE)")
def test_large_file_boundary(shutdown_only, tmp_path, option: str, init_kwargs):
    """Check that packages just under the max size work as expected."""
    # To support Windows we do not use 'with tempfile' as that results in a recursion error (See:
    # https://bugs.python.org/issue42796). Instead we use the tmp_path fixture that will clean up the files at a
    # later time.
    with chdir(tmp_path):
        size = GCS_STORAGE_MAX_SIZE - 1024 * 1024
        with open("test_file", "wb") as f:
            f.write(os.urandom(size))

        if option == "working_dir":
            ray.init(runtime_env={"working_dir": "."}, **init_kwargs)
        else:
            ray.init(runtime_env={"py_modules": ["."]}, **init_kwargs)

        @ray.remote
        class Test:
            def get_size(self):
                with open("test_file", "rb") as f:
                    return len(f.read())

        t = Test.remote()
        assert ray.get(t.get_size.remote()) == size


@pytest.mark.parametrize("option", ["working_dir", "py_modules"])
def test_large_file_error(shutdown_only, tmp_path, option: str, init_kwargs):
    with chdir(tmp_path):
        # Write to two separate files, each of which is below the threshold to make sure the error is for the
        # full package size.
        size = GCS_STORAGE_MAX_SIZE // 2 + 1
        with open("test_file_1", "wb") as f:
            f.write(os.urandom(size))

        with open("test_file_2", "wb") as f:
            f.write(os.urandom(size))

        with pytest.raises(RuntimeEnvSetupError):
            if option == "working_dir":
                ray.init(runtime_env={"working_dir": "."}, **init_kwargs)
            else:
                ray.init(runtime_env={"py_modules": ["."]}, **init_kwargs)


@pytest.mark.parametrize("option", ["working_dir", "py_modules"])
@phalanx_differs("the driver uploading a package prints nothing; Ray logs \"Pushing file package '<uri>' "
                 "(<size>MiB) to Ray cluster...\" and \"Successfully pushed file package '<uri>'.\" "
                 "(runtime_env.upload)")
def test_large_dir_upload_message(start_cluster, option):
    cluster, address = start_cluster
    with tempfile.TemporaryDirectory() as tmp_dir:
        filepath = os.path.join(tmp_dir, "test_file.txt")

        # Ensure forward slashes to prevent escapes in the text passed to stdin (for Windows tests this matters)
        tmp_dir = str(Path(tmp_dir).as_posix())

        if option == "working_dir":
            driver_script = f"""
import ray
ray.init("{address}", runtime_env={{"working_dir": "{tmp_dir}"}})
"""
        else:
            driver_script = f"""
import ray
ray.init("{address}", runtime_env={{"py_modules": ["{tmp_dir}"]}})
"""

        with open(filepath, "w") as f:
            f.write("Hi")

        output = run_string_as_driver(driver_script)
        assert "Pushing file package" in output
        assert "Successfully pushed file package" in output


def test_concurrent_downloads(shutdown_only, init_kwargs):
    # https://github.com/ray-project/ray/issues/30369
    tmpdir = tempfile.mkdtemp()
    # Create an arbitrary nonempty directory to upload.
    dir_to_upload = Path(tmpdir) / "dir_to_upload"
    dir_to_upload.mkdir(parents=True)
    with (dir_to_upload / "file").open("w") as file:
        file.write("F" * 100)

    ray.init(runtime_env={"working_dir": str(dir_to_upload)}, **init_kwargs)
    uri = ray.get_runtime_context().runtime_env["working_dir"]

    @ray.remote(runtime_env={"working_dir": uri, "env_vars": {"A": "B"}})
    def f():
        print("f")

    @ray.remote(runtime_env={"working_dir": uri})
    def g():
        print("g")

    refs = [f.remote(), g.remote()]
    ray.get(refs)


def test_file_created_before_1980(shutdown_only, tmp_working_dir, init_kwargs):
    # Make sure working_dir supports file created before 1980
    # https://github.com/ray-project/ray/issues/46379
    working_path = Path(tmp_working_dir)
    file_1970 = working_path / "1970"
    with file_1970.open(mode="w") as f:
        f.write("1970")
    os.utime(file_1970, (0, 0))

    ray.init(runtime_env={"working_dir": tmp_working_dir}, **init_kwargs)

    @ray.remote
    def task():
        with open("1970") as f:
            assert f.read() == "1970"

    ray.get(task.remote())
