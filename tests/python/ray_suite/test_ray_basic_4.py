"""Ray's `python/ray/tests/test_basic_4.py` (ray-project/ray), through `import ray` only; each test is named
after Ray's test it follows. Ray's `_system_config` knobs in these tests (Ray's own switches: the importer
thread, fork support, lease requests) are given to Ray only (`ray_only_system_config`); phalanx has none of
them, and the tests check what Ray checks with them set."""
import os
import threading

import pytest

import ray
from suite_utils import phalanx_differs

ON_RAY = os.environ.get("RAY_SUITE_TARGET", "phalanx") == "ray"


def ray_only_system_config(config):
    """ray.init's keywords for a Ray `_system_config` that phalanx lacks: given on Ray, left out here."""
    return {"_system_config": config} if ON_RAY else {}


def test_actor_scheduling(shutdown_only, init_kwargs):
    ray.init(**init_kwargs)

    @ray.remote
    class A:
        def run_fail(self):
            ray.actor.exit_actor()

        def get(self):
            return 1

    a = A.remote()
    a.run_fail.remote()
    with pytest.raises(Exception):
        ray.get([a.get.remote()])


def test_function_import_without_importer_thread(shutdown_only, init_kwargs):
    """Test that without background importer thread, dependencies can still be
    imported in workers."""
    ray.init(**ray_only_system_config({"start_python_importer_thread": False}), **init_kwargs)

    @ray.remote
    def f():
        import threading

        assert threading.get_ident() == threading.main_thread().ident
        # Make sure the importer thread is not running.
        for thread in threading.enumerate():
            assert "import" not in thread.name

    @ray.remote
    def g():
        ray.get(f.remote())

    ray.get(g.remote())
    ray.get([g.remote() for _ in range(5)])


def test_fork_support(shutdown_only, init_kwargs):
    """Test that fork support works."""
    ray.init(**ray_only_system_config({"support_fork": True}), **init_kwargs)

    @ray.remote
    def pool_factorial():
        import math
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(processes=4) as pool:
            return sum(pool.map(math.factorial, range(8)))

    @ray.remote
    def g():
        import threading

        assert threading.get_ident() == threading.main_thread().ident
        # Make sure this is the only Python thread, because forking does not
        # work well under multi-threading.
        assert threading.active_count() == 1

        return ray.get(pool_factorial.remote())

    assert ray.get(g.remote()) == 5914


@phalanx_differs("no JobID objects: the runtime context's task_id (a hex string) has no job_id(), an "
                 "ObjectRef has no job_id(), and an actor handle's _actor_id is bytes without .job_id")
def test_job_id_consistency(ray_start_regular):
    @ray.remote
    def foo():
        return "bar"

    @ray.remote
    class Foo:
        def ping(self):
            return "pong"

    @ray.remote
    def verify_job_id(job_id, new_thread):
        def verify():
            current_task_id = ray.runtime_context.get_runtime_context().task_id
            assert job_id == current_task_id.job_id()
            obj1 = foo.remote()
            assert job_id == obj1.job_id()
            obj2 = ray.put(1)
            assert job_id == obj2.job_id()
            a = Foo.remote()
            assert job_id == a._actor_id.job_id
            obj3 = a.ping.remote()
            assert job_id == obj3.job_id()

        if not new_thread:
            verify()
        else:
            exc = []

            def run():
                try:
                    verify()
                except BaseException as e:
                    exc.append(e)

            t = threading.Thread(target=run)
            t.start()
            t.join()
            if len(exc) > 0:
                raise exc[0]

    job_id = ray.runtime_context.get_runtime_context().job_id
    ray.get(verify_job_id.remote(job_id, False))
    ray.get(verify_job_id.remote(job_id, True))


@phalanx_differs("1000 tasks f -> g -> h, each blocking in get, on 1 CPU do not finish in Ray's 60 s on this "
                 "2-core machine: the raylet starts a worker process for every blocked parent (100 tasks: "
                 "101 workers started, 14.5 s) where Ray caps them, and ray.wait(timeout=60) then raises "
                 "UnavailableError (the raylet did not answer within 10 s past the timeout) instead of "
                 "returning what is ready", run=False)
def test_fair_queueing(shutdown_only, init_kwargs):
    ray.init(
        num_cpus=1,
        **ray_only_system_config({
            # Having parallel leases is slow in this case
            # because tasks are scheduled FIFO,
            # the more parallism we have,
            # the more workers we need to start to execute f and g tasks
            # before we can execute the first h task.
            "max_pending_lease_requests_per_scheduling_category": 1,
            "worker_cap_enabled": True,
        }),
        **init_kwargs,
    )

    @ray.remote
    def h():
        return 0

    @ray.remote
    def g():
        return ray.get(h.remote())

    @ray.remote
    def f():
        return ray.get(g.remote())

    # This will never finish without fair queueing of {f, g, h}:
    # https://github.com/ray-project/ray/issues/3644
    timeout = 60.0
    ready, _ = ray.wait(
        [f.remote() for _ in range(1000)], timeout=timeout, num_returns=1000
    )
    assert len(ready) == 1000, len(ready)
