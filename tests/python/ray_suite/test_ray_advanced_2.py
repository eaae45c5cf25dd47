"""Ray's `python/ray/tests/test_advanced_2.py` (ray-project/ray): GPU and neuron-core ids, zero-CPU nodes,
fractional, custom and node-id resources, and tasks placed over several nodes by what they ask for; each test
is named after Ray's and checks what it checks, through `import ray` only.

Changed, for public API only: the node a task ran on (Ray's `ray._private.worker.global_worker.node.unique_id`,
and in test_multiple_raylets the node's `plasma_store_socket_name`, one per node) is
`ray.get_runtime_context().get_node_id()`, compared with the cluster node's `.node_id` (Ray's tests compare
`.unique_id`, the same node's IP and store socket) and with `ray.nodes()`' `NodeID` (Ray's:
`ObjectStoreSocketName`); `ray._private.state.current_node_id()` / `node_ids()` (the `node:IP` resource of this
node / of every node) are written with `ray.util.get_node_ip_address()` and `ray.nodes()`' `Resources`;
`ActorClass._remote([], {}, **kw)` is `.options(**kw).remote()`. The GPUs and neuron cores are logical
(ray.init's num_gpus / resources): no device is needed.

Left out, failing on Ray 2.60 here: test_gpu_ids and test_neuron_core_ids (a task or actor given no GPU / no
neuron core finds no CUDA_VISIBLE_DEVICES / NEURON_RT_VISIBLE_CORES in its environment; Ray's test expects
them set to "")."""
import os
import sys
import time

import numpy as np
import pytest

import ray
import ray.cluster_utils
from ray.util.accelerators import AWS_NEURON_CORE
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from suite_utils import phalanx_differs, wait_for_condition


def node_id():
    """The node this process runs on (Ray's test: ray._private.worker.global_worker.node.unique_id)."""
    return ray.get_runtime_context().get_node_id()


def current_node_id():
    """Ray's ray._private.state.current_node_id(): this node's `node:IP` resource."""
    return "node:" + ray.util.get_node_ip_address()


def node_ids():
    """Ray's ray._private.state.node_ids(): each node's `node:IP` resource."""
    return [key for node in ray.nodes() for key in node["Resources"]
            if key.startswith("node:") and key != "node:__internal_head__"]


def test_gpu_ids_cuda_visible_devices_preset(monkeypatch, shutdown_only, init_kwargs):
    with monkeypatch.context() as m:
        m.setenv("CUDA_VISIBLE_DEVICES", "uuid1,uuid2")
        ray.init(num_gpus=1, **init_kwargs)

        @ray.remote(num_gpus=1)
        def get_gpu_ids():
            return ray.get_gpu_ids()

        assert ray.get(get_gpu_ids.remote()) == ["uuid1"]


def test_zero_cpus(shutdown_only, init_kwargs):
    ray.init(num_cpus=0, **init_kwargs)

    # We should be able to execute a task that requires 0 CPU resources.
    @ray.remote(num_cpus=0)
    def f():
        return 1

    ray.get(f.remote())

    # We should be able to create an actor that requires 0 CPU resources.
    @ray.remote(num_cpus=0)
    class Actor:
        def method(self):
            pass

    a = Actor.remote()
    x = a.method.remote()
    ray.get(x)


def test_zero_cpus_actor(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=0)
    valid_node = cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address)

    @ray.remote
    class Foo:
        def method(self):
            return node_id()

    # Make sure tasks and actors run on the remote raylet.
    a = Foo.remote()
    assert valid_node.node_id == ray.get(a.method.remote())


def test_fractional_resources(shutdown_only, init_kwargs):
    ray.init(num_cpus=6, num_gpus=3, resources={"Custom": 3, "Custom2": 3, "TPU": 3}, **init_kwargs)

    @ray.remote(num_gpus=0.5)
    class Foo1:
        def method(self):
            gpu_ids = ray.get_gpu_ids()
            assert len(gpu_ids) == 1
            return gpu_ids[0]

    foos = [Foo1.remote() for _ in range(6)]
    gpu_ids = ray.get([f.method.remote() for f in foos])
    for i in range(3):
        assert gpu_ids.count(i) == 2
    del foos

    @ray.remote
    class Foo2:
        def method(self):
            pass

    # Create an actor that requires 0.7 of the custom resource.
    f1 = Foo2.options(resources={"Custom": 2.7}).remote()
    ray.get(f1.method.remote())
    # Make sure that we cannot create an actor that requires 0.7 of the
    # custom resource.
    f2 = Foo2.options(resources={"Custom": 0.7}).remote()
    ready, _ = ray.wait([f2.method.remote()], timeout=0.5)
    assert len(ready) == 0
    # Make sure we can start an actor that requries only 0.3 of the custom
    # resource.
    f3 = Foo2.options(resources={"Custom": 0.3}).remote()
    ray.get(f3.method.remote())

    del f1, f3

    # Non unit resources (e.g. CPU, ) allow fractional
    # number of resources greather than 1.
    @ray.remote(num_cpus=1.5, resources={"Custom2": 2.5})
    def test_frac_cpu():
        return True

    assert ray.get(test_frac_cpu.remote())

    # Unit instance resources (GPU, TPU, neuron_core) throw exceptions
    # for fractional number of resources greater than 1.
    @ray.remote(num_gpus=1.5)
    def test_frac_gpu():
        pass

    with pytest.raises(ValueError):
        test_frac_gpu.remote()

    with pytest.raises(ValueError):
        Foo2.options(resources={"TPU": 2.5}).remote()


def test_fractional_memory_round_down(shutdown_only, init_kwargs):
    @ray.remote
    def test():
        pass

    with ray.init(num_cpus=1, _memory=2, **init_kwargs):
        ray.get(test.options(memory=2.9).remote(), timeout=5)

    with ray.init(num_cpus=1, _memory=0.2, **init_kwargs):
        ray.get(test.options(memory=0.5).remote(), timeout=5)

    with ray.init(num_cpus=1, _memory=2.2, **init_kwargs):
        ray.get(test.options(memory=2.9).remote(), timeout=5)
        with pytest.raises(ray.exceptions.GetTimeoutError):
            ray.get(test.options(memory=3.1).remote(), timeout=5)


def test_multiple_raylets(ray_start_cluster):
    # This test will define a bunch of tasks that can only be assigned to
    # specific raylets, and we will check that they are assigned
    # to the correct raylets.
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=11, num_gpus=0)
    cluster.add_node(num_cpus=5, num_gpus=5)
    cluster.add_node(num_cpus=10, num_gpus=1)
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()

    # Define a bunch of remote functions that all return the id of the node
    # they ran on (Ray's test: the socket name of the node's plasma store, one
    # per node), to check which raylet the task was assigned to.

    # This must be run on the zeroth raylet.
    @ray.remote(num_cpus=11)
    def run_on_0():
        return node_id()

    # This must be run on the first raylet.
    @ray.remote(num_gpus=2)
    def run_on_1():
        return node_id()

    # This must be run on the second raylet.
    @ray.remote(num_cpus=6, num_gpus=1)
    def run_on_2():
        return node_id()

    # This can be run anywhere.
    @ray.remote(num_cpus=0, num_gpus=0)
    def run_on_0_1_2():
        return node_id()

    # This must be run on the first or second raylet.
    @ray.remote(num_gpus=1)
    def run_on_1_2():
        return node_id()

    # This must be run on the zeroth or second raylet.
    @ray.remote(num_cpus=8)
    def run_on_0_2():
        return node_id()

    def run_lots_of_tasks():
        names = []
        results = []
        for i in range(100):
            index = np.random.randint(6)
            if index == 0:
                names.append("run_on_0")
                results.append(run_on_0.remote())
            elif index == 1:
                names.append("run_on_1")
                results.append(run_on_1.remote())
            elif index == 2:
                names.append("run_on_2")
                results.append(run_on_2.remote())
            elif index == 3:
                names.append("run_on_0_1_2")
                results.append(run_on_0_1_2.remote())
            elif index == 4:
                names.append("run_on_1_2")
                results.append(run_on_1_2.remote())
            elif index == 5:
                names.append("run_on_0_2")
                results.append(run_on_0_2.remote())
        return names, results

    client_table = ray.nodes()
    store_names = []
    store_names += [client["NodeID"] for client in client_table if client["Resources"].get("GPU", 0) == 0]
    store_names += [client["NodeID"] for client in client_table if client["Resources"].get("GPU", 0) == 5]
    store_names += [client["NodeID"] for client in client_table if client["Resources"].get("GPU", 0) == 1]
    assert len(store_names) == 3

    def validate_names_and_results(names, results):
        for name, result in zip(names, ray.get(results)):
            if name == "run_on_0":
                assert result in [store_names[0]]
            elif name == "run_on_1":
                assert result in [store_names[1]]
            elif name == "run_on_2":
                assert result in [store_names[2]]
            elif name == "run_on_0_1_2":
                assert result in [store_names[0], store_names[1], store_names[2]]
            elif name == "run_on_1_2":
                assert result in [store_names[1], store_names[2]]
            elif name == "run_on_0_2":
                assert result in [store_names[0], store_names[2]]
            else:
                raise Exception("This should be unreachable.")
            assert set(ray.get(results)) == set(store_names)

    names, results = run_lots_of_tasks()
    validate_names_and_results(names, results)

    # Make sure the same thing works when this is nested inside of a task.

    @ray.remote
    def run_nested1():
        names, results = run_lots_of_tasks()
        return names, results

    @ray.remote
    def run_nested2():
        names, results = ray.get(run_nested1.remote())
        return names, results

    names, results = ray.get(run_nested2.remote())
    validate_names_and_results(names, results)


def test_custom_resources(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=1, resources={"CustomResource": 0})
    custom_resource_node = cluster.add_node(num_cpus=1, resources={"CustomResource": 1})
    ray.init(address=cluster.address)

    @ray.remote
    def f():
        return node_id()

    @ray.remote(resources={"CustomResource": 1})
    def g():
        return node_id()

    @ray.remote(resources={"CustomResource": 1})
    def h():
        ray.get([f.remote() for _ in range(5)])
        return node_id()

    # The g tasks should be scheduled only on the second raylet.
    raylet_ids = set(ray.get([g.remote() for _ in range(50)]))
    assert len(raylet_ids) == 1
    assert list(raylet_ids)[0] == custom_resource_node.node_id

    # Make sure that resource bookkeeping works when a task that uses a
    # custom resources gets blocked.
    ray.get([h.remote() for _ in range(5)])


@phalanx_differs("a node offers no `node:IP` resource (Ray: node:<ip> = 1 on each node, node:__internal_head__ "
                 "on the head), in ray.nodes()' Resources or for scheduling")
def test_node_id_resource(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=3)
    cluster.add_node(num_cpus=3)
    ray.init(address=cluster.address)

    local_node = current_node_id()

    # Note that these will have the same IP in the test cluster
    assert len(node_ids()) == 2
    assert local_node in node_ids()

    @ray.remote(resources={local_node: 1})
    def f():
        return current_node_id()

    # Check the node id resource is automatically usable for scheduling.
    assert ray.get(f.remote()) == current_node_id()


def test_two_custom_resources(ray_start_cluster):
    cluster = ray_start_cluster
    cluster.add_node(num_cpus=3, resources={"CustomResource1": 1, "CustomResource2": 2})
    custom_resource_node = cluster.add_node(num_cpus=3, resources={"CustomResource1": 3, "CustomResource2": 4})
    ray.init(address=cluster.address)

    @ray.remote
    def foo():
        # Sleep a while to emulate a slow operation. This is needed to make
        # sure tasks are scheduled to different nodes.
        time.sleep(0.1)
        return node_id()

    # Make sure each node has at least one idle worker.
    wait_for_condition(lambda: len(set(ray.get([foo.remote() for _ in range(6)]))) == 2)

    # Make sure the resource view is refreshed.
    time.sleep(1)

    @ray.remote(resources={"CustomResource1": 1})
    def f():
        time.sleep(0.001)
        return node_id()

    @ray.remote(resources={"CustomResource2": 1})
    def g():
        time.sleep(0.001)
        return node_id()

    @ray.remote(resources={"CustomResource1": 1, "CustomResource2": 3})
    def h():
        time.sleep(0.001)
        return node_id()

    @ray.remote(resources={"CustomResource1": 4})
    def j():
        time.sleep(0.001)
        return node_id()

    @ray.remote(resources={"CustomResource3": 1})
    def k():
        time.sleep(0.001)
        return node_id()

    # The f and g tasks should be scheduled on both raylets.
    assert len(set(ray.get([f.remote() for _ in range(500)]))) == 2
    assert len(set(ray.get([g.remote() for _ in range(500)]))) == 2

    # The h tasks should be scheduled only on the second raylet.
    raylet_ids = set(ray.get([h.remote() for _ in range(50)]))
    assert len(raylet_ids) == 1
    assert list(raylet_ids)[0] == custom_resource_node.node_id

    # Make sure that tasks with unsatisfied custom resource requirements do
    # not get scheduled.
    ready_ids, remaining_ids = ray.wait([j.remote(), k.remote()], timeout=0.5)
    assert ready_ids == []


def test_many_custom_resources(shutdown_only, init_kwargs):
    # This eventually turns into a command line argument which on windows is
    # limited to 32,767 characters.
    if sys.platform == "win32":
        num_custom_resources = 1000
    else:
        num_custom_resources = 10000
    total_resources = {str(i): np.random.randint(1, 7) for i in range(num_custom_resources)}  # noqa
    ray.init(num_cpus=5, resources=total_resources, **init_kwargs)

    def f():
        return 1

    remote_functions = []
    for _ in range(20):
        num_resources = np.random.randint(0, num_custom_resources + 1)
        permuted_resources = np.random.permutation(num_custom_resources)[:num_resources]
        random_resources = {str(i): total_resources[str(i)] for i in permuted_resources}
        remote_function = ray.remote(resources=random_resources)(f)
        remote_functions.append(remote_function)

    remote_functions.append(ray.remote(f))
    remote_functions.append(ray.remote(resources=total_resources)(f))

    results = []
    for remote_function in remote_functions:
        results.append(remote_function.remote())
        results.append(remote_function.remote())
        results.append(remote_function.remote())

    ray.get(results)


@phalanx_differs("get_accelerator_ids() has only \"GPU\": neuron_cores get no ids and no NEURON_RT_VISIBLE_CORES")
def test_neuron_core_with_placement_group(shutdown_only, init_kwargs):
    neuron_cores = 2
    ray.init(num_cpus=1, resources={"neuron_cores": neuron_cores}, **init_kwargs)

    @ray.remote(resources={"neuron_cores": neuron_cores})
    class NeuronCoreActor:
        def __init__(self):
            pass

        def ready(self):
            neuron_core_ids = ray.get_runtime_context().get_accelerator_ids()["neuron_cores"]
            assert len(neuron_core_ids) == neuron_cores
            assert os.environ["NEURON_RT_VISIBLE_CORES"] == ",".join([str(i) for i in neuron_core_ids])  # noqa

    # Reserve a placement group of 1 bundle that reserves 1 CPU and 2 NeuronCore.
    pg = placement_group([{"CPU": 1, "neuron_cores": neuron_cores}])

    # Wait until placement group is created.
    ray.get(pg.ready(), timeout=10)

    actor = NeuronCoreActor.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg,
        )
    ).remote()

    ray.get(actor.ready.remote(), timeout=10)


@phalanx_differs("get_accelerator_ids() has only \"GPU\": neuron_cores get no ids and no NEURON_RT_VISIBLE_CORES")
def test_gpu_and_neuron_cores(shutdown_only, init_kwargs):
    num_gpus = 2
    num_nc = 2
    ray.init(num_cpus=2, num_gpus=num_gpus, resources={"neuron_cores": num_nc}, **init_kwargs)

    def get_gpu_ids(num_gpus_per_worker):
        gpu_ids = ray.get_gpu_ids()
        assert len(gpu_ids) == num_gpus_per_worker
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join([str(i) for i in gpu_ids])  # noqa
        for gpu_id in gpu_ids:
            assert gpu_id in range(num_gpus)
        gpu_ids_from_runtime_context = ray.get_runtime_context().get_accelerator_ids()["GPU"]
        for gpu_id in gpu_ids_from_runtime_context:
            assert gpu_id in [str(i) for i in range(num_gpus)]
        return len(gpu_ids)

    def get_neuron_core_ids(neuron_cores_per_worker):
        neuron_core_ids = ray.get_runtime_context().get_accelerator_ids()["neuron_cores"]
        assert len(neuron_core_ids) == neuron_cores_per_worker
        cores = os.environ.get("NEURON_RT_VISIBLE_CORES")
        if cores is not None:
            assert cores == ",".join([str(i) for i in neuron_core_ids])  # noqa
        for neuron_core_id in neuron_core_ids:
            assert neuron_core_id in [str(i) for i in range(num_nc)]
        return len(neuron_core_ids)

    gpu_f = ray.remote(num_gpus=2)(lambda: get_gpu_ids(2))
    assert ray.get(gpu_f.remote()) == 2
    nc_f = ray.remote(resources={"neuron_cores": 2})(lambda: get_neuron_core_ids(2))
    assert ray.get(nc_f.remote()) == 2


def test_zero_capacity_deletion_semantics(shutdown_only, init_kwargs):
    ray.init(num_cpus=2, num_gpus=1, resources={"test_resource": 1}, **init_kwargs)

    def delete_miscellaneous_item(resources):
        del resources["memory"]
        del resources["object_store_memory"]
        for key in list(resources.keys()):
            if key.startswith("node:"):
                del resources[key]

    def test():
        resources = ray.available_resources()
        MAX_RETRY_ATTEMPTS = 5
        retry_count = 0

        delete_miscellaneous_item(resources)

        while resources and retry_count < MAX_RETRY_ATTEMPTS:
            time.sleep(0.1)
            resources = ray.available_resources()
            delete_miscellaneous_item(resources)
            retry_count += 1

        if retry_count >= MAX_RETRY_ATTEMPTS:
            raise RuntimeError(f"Resources were available even after {MAX_RETRY_ATTEMPTS} retries.", resources)

        return resources

    function = ray.remote(num_cpus=2, num_gpus=1, resources={"test_resource": 1})(test)
    cluster_resources = ray.get(function.remote())

    # All cluster resources should be utilized and
    # cluster_resources must be empty
    assert cluster_resources == {}
