"""Ray's `python/ray/tests/test_failure_2.py` (ray-project/ray), through `import ray` only; each test is named
after Ray's test it follows and checks what it checks. Ray's `_system_config` knobs of `test_fate_sharing` (its
health-check periods) are given to Ray only; phalanx notices a dead node in 1.5 s by default.

Left out, Ray's internals only: `test_warning_for_too_many_actors`, `test_warning_for_too_many_nested_tasks`,
`test_warning_for_dead_node` (the GCS error pubsub, `init_error_pubsub`/`get_error_message`, and
`kill_raylet` of `ray._private`'s node); `test_warning_for_dead_autoscaler` (the monitor process of
`ray._private.worker._global_node` and `_internal_kv_get`); `test_raylet_crash_when_get`, `test_eviction`
(`ray._private.internal_api.free`, and `kill_raylet`); `test_list_named_actors_timeout`
(`RAY_testing_asio_delay_us`, Ray's gRPC delay injection); `test_raylet_node_manager_server_failure` (the log
pubsub, `get_log_batch`); `test_gcs_server_crash_cluster` (the GCS server's pid from the node's
`all_processes`, `ray._private`).

Marked as differing on phalanx (suite_utils.phalanx_differs): `test_fate_sharing` with tasks
(`use_actors=False`, both failures): the child task on another node is not killed when the actor that
submitted it, or that actor's node, dies."""
import os
import time

import pytest

import ray
from suite_utils import phalanx_differs, wait_for_condition

ON_RAY = os.environ.get("RAY_SUITE_TARGET", "phalanx") == "ray"

# A task does not share its submitter's fate on phalanx: when the actor that submitted it dies (its process
# killed, or its node removed), the task it submitted to another node keeps that node's "child" resource
# (it is not killed); Ray kills it (its owner died). Actors do share their creator's fate on phalanx (the
# use_actors cases pass).
TASK_FATE = phalanx_differs("a task is not killed when the worker that submitted it (or that worker's node) "
                            "died, and keeps its resources: tasks do not share their submitter's fate, actors do")


@pytest.mark.parametrize(
    "ray_start_cluster",
    [
        {
            "num_nodes": 2,
            "num_cpus": 1,
        },
        {
            "num_nodes": 1,
            "num_cpus": 2,
        },
    ],
    indirect=True,
)
def test_serialized_id(ray_start_cluster):
    @ray.remote
    def small_object():
        # Sleep a bit before creating the object to force a timeout
        # at the getter.
        time.sleep(1)
        return 1

    @ray.remote
    def dependent_task(x):
        return x

    @ray.remote
    def get(obj_refs, test_dependent_task):
        print("get", obj_refs)
        obj_ref = obj_refs[0]
        if test_dependent_task:
            assert ray.get(dependent_task.remote(obj_ref)) == 1
        else:
            assert ray.get(obj_ref) == 1

    obj = small_object.remote()
    ray.get(get.remote([obj], False))

    obj = small_object.remote()
    ray.get(get.remote([obj], True))

    obj = ray.put(1)
    ray.get(get.remote([obj], False))

    obj = ray.put(1)
    ray.get(get.remote([obj], True))


@pytest.mark.parametrize(
    "use_actors,node_failure",
    [pytest.param(False, False, marks=TASK_FATE), pytest.param(False, True, marks=TASK_FATE), (True, False),
     (True, True)],
)
def test_fate_sharing(ray_start_cluster, use_actors, node_failure):
    config = {
        "health_check_initial_delay_ms": 0,
        "health_check_period_ms": 100,
        "health_check_failure_threshold": 10,
    }
    cluster = ray_start_cluster
    # Head node with no resources.
    cluster.add_node(num_cpus=0, **({"_system_config": config} if ON_RAY else {}))
    ray.init(address=cluster.address)
    # Node to place the parent actor.
    node_to_kill = cluster.add_node(num_cpus=1, resources={"parent": 1})
    # Node to place the child actor.
    cluster.add_node(num_cpus=1, resources={"child": 1})
    cluster.wait_for_nodes()

    @ray.remote
    def sleep():
        time.sleep(1000)

    @ray.remote(resources={"child": 1})
    def probe():
        return

    # TODO(swang): This test does not pass if max_restarts > 0 for the
    # raylet codepath. Add this parameter once the GCS actor service is enabled
    # by default.
    @ray.remote
    class Actor(object):
        def __init__(self):
            return

        def start_child(self, use_actors):
            if use_actors:
                child = Actor.options(resources={"child": 1}).remote()
                ray.get(child.sleep.remote())
            else:
                ray.get(sleep.options(resources={"child": 1}).remote())

        def sleep(self):
            time.sleep(1000)

        def get_pid(self):
            return os.getpid()

    # Returns whether the "child" resource is available.
    def child_resource_available():
        p = probe.remote()
        ready, _ = ray.wait([p], timeout=1)
        return len(ready) > 0

    # Test fate sharing if the parent process dies.
    def test_process_failure(use_actors):
        a = Actor.options(resources={"parent": 1}).remote()
        pid = ray.get(a.get_pid.remote())
        a.start_child.remote(use_actors=use_actors)
        # Wait for the child to be scheduled.
        wait_for_condition(lambda: not child_resource_available())
        # Kill the parent process.
        os.kill(pid, 9)
        wait_for_condition(child_resource_available)

    # Test fate sharing if the parent node dies.
    def test_node_failure(node_to_kill, use_actors):
        a = Actor.options(resources={"parent": 1}).remote()
        a.start_child.remote(use_actors=use_actors)
        # Wait for the child to be scheduled.
        wait_for_condition(lambda: not child_resource_available())
        # Kill the parent process.
        cluster.remove_node(node_to_kill, allow_graceful=False)
        node_to_kill = cluster.add_node(num_cpus=1, resources={"parent": 1})
        wait_for_condition(child_resource_available)
        return node_to_kill

    if node_failure:
        test_node_failure(node_to_kill, use_actors)
    else:
        test_process_failure(use_actors)
