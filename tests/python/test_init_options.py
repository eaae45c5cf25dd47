"""Ray's init() keywords, JobConfig, LoggingConfig, RuntimeEnv and the runtime context's remaining
methods on phalanx (issue 55): each one's effect observed, or its refusal read."""
import json
import os
import urllib.request
import warnings

import pytest

import phalanx
from phalanx.job_config import JobConfig
from phalanx.runtime_env import RuntimeEnv, RuntimeEnvConfig
from phalanx.util.placement_group import placement_group
from phalanx.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@pytest.fixture
def fresh():
    phalanx.shutdown()
    yield
    phalanx.shutdown()


def test_a_job_config_gives_the_jobs_namespace_env_lifetime_and_code_path(fresh, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "jobmod.py").write_text("VALUE = 'from code_search_path'\n")
    config = JobConfig(code_search_path=[str(lib)], runtime_env={"env_vars": {"JOBVAR": "1"}},
                       ray_namespace="jobns", default_actor_lifetime="detached", metadata={"owner": "me"})
    phalanx.init(num_cpus=1, job_config=config)

    @phalanx.remote
    def probe():
        import jobmod
        return jobmod.VALUE, os.environ.get("JOBVAR")

    assert phalanx.get(probe.remote(), timeout=60) == ("from code_search_path", "1")
    assert phalanx.get_runtime_context().namespace == "jobns"

    @phalanx.remote
    class Kept:
        def ok(self):
            return True

    Kept.options(name="kept").remote()
    assert phalanx.get(phalanx.get_actor("kept").ok.remote(), timeout=60)
    assert phalanx._private.state.job_metadata == {"owner": "me"}
    with pytest.raises(NotImplementedError, match="JVM"):
        JobConfig(jvm_options=["-Xmx1g"])
    with pytest.raises(ValueError, match="default_actor_lifetime"):
        JobConfig(default_actor_lifetime="forever")
    assert JobConfig.from_json(json.dumps({"ray_namespace": "x"})).ray_namespace == "x"


def test_a_logging_config_formats_the_drivers_and_the_workers_records(fresh, capfd):
    phalanx.init(num_cpus=1, logging_config=phalanx.LoggingConfig(encoding="JSON", log_level="INFO"))

    @phalanx.remote
    def logs():
        import logging
        logging.getLogger("user").info("from the task")
        return phalanx.get_runtime_context().get_task_id()

    task_id = phalanx.get(logs.remote(), timeout=60)
    import logging
    logging.getLogger("user").info("from the driver")
    err = capfd.readouterr().err
    driver = [json.loads(line) for line in err.splitlines() if line.startswith("{") and "from the driver" in line]
    assert driver and driver[0]["levelname"] == "INFO" and driver[0]["job_id"]
    # the task's record reached the driver through log_to_driver, as JSON with its task id
    from conftest import wait_until
    seen = [err]
    wait_until(lambda: seen.append(capfd.readouterr().err) or task_id in "".join(seen), timeout=30,
               what="the task's JSON record")
    with pytest.raises(ValueError, match="Invalid encoding type"):
        phalanx.LoggingConfig(encoding="XML")
    logging.getLogger().handlers = [h for h in logging.getLogger().handlers
                                    if not getattr(h, "_phalanx_logging_config", False)]


def test_rays_other_init_keywords_act_or_say_why(fresh, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = phalanx.init(num_cpus=1, local_mode=True, _temp_dir=str(tmp_path / "tmp"), _memory=123456789,
                            _plasma_directory="/dev/shm", _metrics_export_port=0, logging_format="%(message)s")
    assert any(issubclass(w.category, DeprecationWarning) and "local_mode" in str(w.message) for w in caught)
    assert info["session_dir"].startswith(str(tmp_path / "tmp"))
    assert phalanx.cluster_resources()["memory"] == 123456789
    phalanx.shutdown()
    with pytest.raises(ValueError, match="ray.io/node-id"):
        phalanx.init(labels={"ray.io/node-id": "a"})  # (the system's)
    with pytest.raises(ValueError, match="Invalid label value"):
        phalanx.init(labels={"zone": "not ok"})
    with pytest.raises(NotImplementedError, match="cgroups"):
        phalanx.init(enable_resource_isolation=True)
    with pytest.raises(TypeError, match="no_such_option"):
        phalanx.init(no_such_option=1)


def test_include_dashboard_serves_the_dashboard_at_the_port_given(fresh):
    from phalanx._private.node import free_port
    port = free_port()
    info = phalanx.init(num_cpus=1, include_dashboard=True, dashboard_port=port)
    assert info.dashboard_url == f"127.0.0.1:{port}"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
        assert r.status == 200


def test_runtime_env_classes_and_the_contexts_remaining_methods(fresh, tmp_path):
    env = RuntimeEnv(env_vars={"A": "b"}, config=RuntimeEnvConfig(setup_timeout_seconds=30))
    assert env.env_vars() == {"A": "b"} and env["config"]["setup_timeout_seconds"] == 30
    assert RuntimeEnv.deserialize(env.serialize()) == env
    with pytest.raises(NotImplementedError, match="'pip' is not supported"):
        RuntimeEnv(pip=["requests"])
    with pytest.raises(ValueError, match="setup_timeout_seconds"):
        RuntimeEnvConfig(setup_timeout_seconds=0)
    phalanx.init(num_cpus=2, runtime_env=env)
    ctx = phalanx.get_runtime_context()
    assert ctx.get_worker_id() and ctx.get_session_name() in ctx.gcs_address or ctx.get_session_name()
    assert ctx.get_actor_name() is None and ctx.get_task_function_name() is None
    assert json.loads(ctx.get_runtime_env_string())["env_vars"] == {"A": "b"}

    @phalanx.remote
    class Named:
        def who(self):
            c = phalanx.get_runtime_context()
            return c.get_actor_name(), c.get_task_function_name(), c.get_node_labels()

    name, fn, labels = phalanx.get(Named.options(name="n1").remote().who.remote(), timeout=60)
    assert name == "n1" and fn.endswith("Named.who") and labels["ray.io/node-id"] == ctx.get_node_id()

    pg = placement_group([{"CPU": 1}])
    phalanx.get(pg.ready(), timeout=60)

    @phalanx.remote(num_cpus=1)
    def in_group():
        c = phalanx.get_runtime_context()
        current = phalanx.util.get_current_placement_group()
        return current.id.hex(), c.current_placement_group_id.hex(), c.should_capture_child_tasks_in_placement_group

    got = phalanx.get(in_group.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, placement_group_capture_child_tasks=True)).remote(), timeout=60)
    assert got == (pg.id.hex(), pg.id.hex(), True)
    assert phalanx.util.get_current_placement_group() is None  # (a driver is in none)
    assert not pg.is_empty and phalanx.get_neuron_core_ids() == []


def test_a_task_reads_the_cluster_as_a_driver_does(fresh):
    phalanx.init(num_cpus=2, address="local")  # (Ray's "local": a new cluster here)

    @phalanx.remote
    def look():
        import phalanx.util as util
        return (phalanx.cluster_resources()["CPU"], len(phalanx.nodes()), util.get_node_ip_address(),
                util.list_named_actors())

    @phalanx.remote
    class Named:
        pass

    keep = Named.options(name="seen").remote()  # noqa: F841
    cpus, nodes, ip, names = phalanx.get(look.remote(), timeout=60)
    assert (cpus, nodes, ip) == (2.0, 1, "127.0.0.1") and "seen" in names
