"""Ray's `python/ray/tests/test_reference_counting.py` (ray-project/ray), through `import ray` only; each test is
named after Ray's test it follows and checks what it checks that a public call can observe.

Changed, for public API only: Ray's `_fill_object_store_and_get(id, succeed=True)` fills the store (as Ray's)
and then reads `core_worker.object_exists`; here it fills the store the same way and then fetches the object
through a ref rebuilt from its id (`ray.ObjectRef(bytes)`), which must give its value: the object is still
pinned. `put_object` (Ray's test helper: `ray.put` or a task's return) and `kill_actor_and_wait_for_failure`
(`ray.kill`, then wait until a call raises RayActorError, instead of reading the GCS's actor table) are
written here. `test_out_of_band_serialized_object_ref` keeps its public check (a ref pickled with
`ray.cloudpickle` still gets the value after the original is gone) without Ray's reference-count table.
`test_kill_actor_immediately_after_creation` checks the actors are dead through a call on each (RayActorError)
instead of `ray.state.actors()`. Ray's `_system_config` knobs of `one_worker_100MiB` (no spilling, no retry
delay) are given to Ray only.

Left out of the tests that keep the rest: Ray's `_fill_object_store_and_get(id, succeed=False)`, the check
that the object was released at the end (it reads the local store through the core worker). No public call
observes it on Ray here: `ray.get` of a ref rebuilt from the id of an object that is gone crashes Ray's raylet
(its owner address is unknown: core_worker_client_pool.cc's check), and `ray.util.state.list_objects` needs
Ray's dashboard, which this machine's Ray (without `ray[default]`) does not start.

Left out: `test_local_refcounts`, `test_dependency_refcounts` (they compare the counts in
`core_worker.get_all_reference_counts()`, Ray's private table: local and submitted counts of each id);
`test_feature_flag` (checks through `core_worker.object_exists` that an object still referenced was spilled
out of the local store: store residency, not publicly observable); `test_remove_actor_immediately_after_creation`
(actors with no handle left are found dead only through `ray.state.actors()` / the state API, which needs
Ray's dashboard here).

Marked as differing on phalanx (suite_utils.phalanx_differs): `test_captured_object_ref` (a ref captured in a
remote function's closure is pickled out of band and not counted, so the object is freed and the task's get
waits forever; Ray pins it) and the `failure` cases of `test_recursive_serialized_reference` (WorkerCrashedError
after a retry where Ray raises OwnerDiedError: phalanx has no owner process)."""
import os
import sys

import numpy as np
import pytest

import ray
from suite_utils import Signal as SignalActor
from suite_utils import phalanx_differs, wait_for_condition

ON_RAY = os.environ.get("RAY_SUITE_TARGET", "phalanx") == "ray"


# The tail task's worker is also the process that submitted it (one CPU): Ray fails its return with
# OwnerDiedError and does not retry it (its owner is gone); phalanx has no owner process, retries the task
# (max_retries=1) and then fails it with WorkerCrashedError (scheduler/task_manager_workers.cc,
# TaskManager::OnWorkerDied).
OWNER_DIED_TAIL = phalanx_differs("a task whose submitting worker died with it fails with WorkerCrashedError "
                                  "after its retry, where Ray raises OwnerDiedError (phalanx has no owner process)")


@pytest.fixture
def one_worker_100MiB(request):
    # It has lots of tests that don't require object spilling.
    config = {"task_retry_delay_ms": 0, "automatic_object_spilling_enabled": False}
    if ray.is_initialized():
        ray.shutdown()
    kwargs = {"_system_config": config, "include_dashboard": False} if ON_RAY else {}
    yield ray.init(num_cpus=1, object_store_memory=100 * 1024 * 1024, **kwargs)
    ray.shutdown()


@ray.remote
def _put(obj):
    return obj


def put_object(obj, use_ray_put):
    """Ray's test helper: the object put by the driver, or returned by a task."""
    if use_ray_put:
        return ray.put(obj)
    return _put.remote(obj)


def kill_actor_and_wait_for_failure(actor, method, timeout=10):
    """Ray's test helper, through public calls: kill the actor and wait until a call of `method` (one of its
    methods, taking no arguments) fails."""
    ray.kill(actor)

    def dead():
        try:
            ray.get(method.remote(), timeout=1)
        except ray.exceptions.RayActorError:
            return True
        return False

    wait_for_condition(dead, timeout=timeout)


def _fill_object_store_and_get(obj, succeed=True, object_MiB=20, num_objects=5):
    """Ray's helper for succeed=True: fill the store (unpinned objects would be evicted), then the object must
    still be there (its value fetched through a ref rebuilt from its id)."""
    assert succeed, "the release of an object is not observable through public calls here (see the header)"
    for _ in range(num_objects):
        ray.put(np.zeros(object_MiB * 1024 * 1024, dtype=np.uint8))

    if type(obj) is bytes:
        obj = ray.ObjectRef(obj)
    ray.get(obj, timeout=30)


def test_basic_pinning(one_worker_100MiB):
    @ray.remote
    def f(array):
        return np.sum(array)

    @ray.remote
    class Actor(object):
        def __init__(self):
            # Hold a long-lived reference to a ray.put object's ID. The object
            # should not be garbage collected while the actor is alive because
            # the object is pinned by the raylet.
            self.large_object = ray.put(np.zeros(25 * 1024 * 1024, dtype=np.uint8))

        def get_large_object(self):
            return ray.get(self.large_object)

    actor = Actor.remote()

    # Fill up the object store with short-lived objects. These should be
    # evicted before the long-lived object whose reference is held by
    # the actor.
    for batch in range(10):
        intermediate_result = f.remote(np.zeros(10 * 1024 * 1024, dtype=np.uint8))
        ray.get(intermediate_result)

    # The ray.get below would fail with only LRU eviction, as the object
    # that was ray.put by the actor would have been evicted.
    ray.get(actor.get_large_object.remote())


def test_pending_task_dependency_pinning(one_worker_100MiB):
    @ray.remote
    def pending(input1, input2):
        return

    # The object that is ray.put here will go out of scope immediately, so if
    # pending task dependencies aren't considered, it will be evicted before
    # the ray.get below due to the subsequent ray.puts that fill up the object
    # store.
    np_array = np.zeros(20 * 1024 * 1024, dtype=np.uint8)
    signal = SignalActor.remote()
    obj_ref = pending.remote(np_array, signal.wait.remote())

    for _ in range(2):
        ray.put(np.zeros(20 * 1024 * 1024, dtype=np.uint8))

    ray.get(signal.send.remote())
    ray.get(obj_ref)


def test_out_of_band_serialized_object_ref(one_worker_100MiB):
    obj_ref = ray.put("hello")
    obj_ref_str = ray.cloudpickle.dumps(obj_ref)
    del obj_ref
    assert ray.get(ray.cloudpickle.loads(obj_ref_str)) == "hello"


@phalanx_differs("a ref captured in a remote function's or an actor class's closure is pickled out of band and "
                 "not counted: the object is freed when the driver's refs go, and the task's get of it waits "
                 "forever (Ray pins the objects of refs serialized out of band)", run=False)
def test_captured_object_ref(one_worker_100MiB):
    captured_id = ray.put(np.zeros(10 * 1024 * 1024, dtype=np.uint8))

    @ray.remote
    def f(signal):
        ray.get(signal.wait.remote())
        ray.get(captured_id)  # noqa: F821

    signal = SignalActor.remote()
    obj_ref = f.remote(signal)

    # Delete local references.
    del f
    del captured_id

    # Test that the captured object ref is pinned despite having no local
    # references.
    ray.get(signal.send.remote())
    _fill_object_store_and_get(obj_ref)

    captured_id = ray.put(np.zeros(10 * 1024 * 1024, dtype=np.uint8))

    @ray.remote
    class Actor:
        def get(self, signal):
            ray.get(signal.wait.remote())
            ray.get(captured_id)  # noqa: F821

    signal = SignalActor.remote()
    actor = Actor.remote()
    obj_ref = actor.get.remote(signal)

    # Delete local references.
    del Actor
    del captured_id

    # Test that the captured object ref is pinned despite having no local
    # references.
    ray.get(signal.send.remote())
    _fill_object_store_and_get(obj_ref)


# Remote function takes serialized reference and doesn't hold onto it after
# finishing. Referenced object shouldn't be evicted while the task is pending
# and should be evicted after it returns.
@pytest.mark.parametrize("use_ray_put,failure", [(False, False), (False, True), (True, False), (True, True)])
def test_basic_serialized_reference(one_worker_100MiB, use_ray_put, failure):
    @ray.remote(max_retries=1)
    def pending(ref, dep):
        ray.get(ref[0])
        if failure:
            os._exit(0)

    array_oid = put_object(np.zeros(20 * 1024 * 1024, dtype=np.uint8), use_ray_put)
    signal = SignalActor.remote()
    obj_ref = pending.remote([array_oid], signal.wait.remote())

    # Remove the local reference.
    array_oid_bytes = array_oid.binary()
    del array_oid

    # Check that the remote reference pins the object.
    _fill_object_store_and_get(array_oid_bytes)

    # Fulfill the dependency, causing the task to finish.
    ray.get(signal.send.remote())
    try:
        ray.get(obj_ref)
        assert not failure
    except ray.exceptions.WorkerCrashedError:
        assert failure


# Call a recursive chain of tasks that pass a serialized reference to the end
# of the chain. The reference should still exist while the final task in the
# chain is running and should be removed once it finishes.
@pytest.mark.parametrize("use_ray_put,failure", [(False, False), pytest.param(False, True, marks=OWNER_DIED_TAIL),
                                                 (True, False), pytest.param(True, True, marks=OWNER_DIED_TAIL)])
def test_recursive_serialized_reference(one_worker_100MiB, use_ray_put, failure):
    @ray.remote(max_retries=1)
    def recursive(ref, signal, max_depth, depth=0):
        ray.get(ref[0])
        if depth == max_depth:
            ray.get(signal.wait.remote())
            if failure:
                os._exit(0)
            return
        else:
            return recursive.remote(ref, signal, max_depth, depth + 1)

    signal = SignalActor.remote()

    max_depth = 5
    array_oid = put_object(np.zeros(20 * 1024 * 1024, dtype=np.uint8), use_ray_put)
    head_oid = recursive.remote([array_oid], signal, max_depth)

    # Remove the local reference.
    array_oid_bytes = array_oid.binary()
    del array_oid

    tail_oid = head_oid
    for _ in range(max_depth):
        tail_oid = ray.get(tail_oid)

    # Check that the remote reference pins the object.
    _fill_object_store_and_get(array_oid_bytes)

    # Fulfill the dependency, causing the tail task to finish.
    ray.get(signal.send.remote())
    try:
        assert ray.get(tail_oid) is None
        assert not failure
    except ray.exceptions.OwnerDiedError:
        # There is only 1 core, so the same worker will execute all `recursive`
        # tasks. Therefore, if we kill the worker during the last task, its
        # owner (the worker that executed the second-to-last task) will also
        # have died.
        assert failure


# Test that a passed reference held by an actor after the method finishes
# is kept until the reference is removed from the actor. Also tests giving
# the actor a duplicate reference to the same object ref.
@pytest.mark.parametrize("use_ray_put,failure", [(False, False), (False, True), (True, False), (True, True)])
def test_actor_holding_serialized_reference(one_worker_100MiB, use_ray_put, failure):
    @ray.remote
    class GreedyActor(object):
        def __init__(self):
            pass

        def set_ref1(self, ref):
            self.ref1 = ref

        def add_ref2(self, new_ref):
            self.ref2 = new_ref

        def delete_ref1(self):
            self.ref1 = None

        def delete_ref2(self):
            self.ref2 = None

    # Test that the reference held by the actor isn't evicted.
    array_oid = put_object(np.zeros(20 * 1024 * 1024, dtype=np.uint8), use_ray_put)
    actor = GreedyActor.remote()
    actor.set_ref1.remote([array_oid])

    # Test that giving the same actor a duplicate reference works.
    ray.get(actor.add_ref2.remote([array_oid]))

    # Remove the local reference.
    array_oid_bytes = array_oid.binary()
    del array_oid

    # Test that the remote references still pin the object.
    _fill_object_store_and_get(array_oid_bytes)

    # Test that removing only the first reference doesn't unpin the object.
    ray.get(actor.delete_ref1.remote())
    _fill_object_store_and_get(array_oid_bytes)

    if failure:
        # Test that the actor exiting stops the reference from being pinned.
        # Kill the actor and wait for the actor to exit.
        kill_actor_and_wait_for_failure(actor, actor.delete_ref1)
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.delete_ref1.remote())
    else:
        # Test that deleting the second reference stops it from being pinned.
        ray.get(actor.delete_ref2.remote())


# Test that a passed reference held by an actor after a task finishes
# is kept until the reference is removed from the worker. Also tests giving
# the worker a duplicate reference to the same object ref.
@pytest.mark.skipif(sys.platform == "win32", reason="Failing on Windows.")
@pytest.mark.parametrize("use_ray_put,failure", [(False, False), (False, True), (True, False), (True, True)])
def test_worker_holding_serialized_reference(one_worker_100MiB, use_ray_put, failure):
    @ray.remote(max_retries=1)
    def child(dep1, dep2):
        if failure:
            os._exit(0)
        return

    @ray.remote
    class Submitter:
        def __init__(self):
            pass

        def launch_pending_task(self, ref, signal):
            return child.remote(ref[0], signal.wait.remote())

    signal = SignalActor.remote()

    # Test that the reference held by the actor isn't evicted.
    array_oid = put_object(np.zeros(20 * 1024 * 1024, dtype=np.uint8), use_ray_put)
    s = Submitter.remote()
    child_return_id = ray.get(s.launch_pending_task.remote([array_oid], signal))

    # Remove the local reference.
    array_oid_bytes = array_oid.binary()
    del array_oid

    # Test that the reference prevents the object from being evicted.
    _fill_object_store_and_get(array_oid_bytes)

    ray.get(signal.send.remote())
    try:
        ray.get(child_return_id)
        assert not failure
    except ray.exceptions.WorkerCrashedError:
        assert failure
    del child_return_id


# Test that an object containing object refs within it pins the inner IDs.
def test_basic_nested_ids(one_worker_100MiB):
    inner_oid = ray.put(np.zeros(20 * 1024 * 1024, dtype=np.uint8))
    outer_oid = ray.put([inner_oid])

    # Remove the local reference to the inner object.
    inner_oid_bytes = inner_oid.binary()
    del inner_oid

    # Check that the outer reference pins the inner object.
    _fill_object_store_and_get(inner_oid_bytes)

    # Remove the outer reference.
    del outer_oid


@pytest.mark.skipif(sys.platform == "win32", reason="Failing on Windows.")
def test_kill_actor_immediately_after_creation(ray_start_regular):
    @ray.remote
    class A:
        def ping(self):
            return

    a = A.remote()
    b = A.remote()

    ray.kill(a)
    ray.kill(b)

    def _all_actors_dead():
        for actor in (a, b):
            try:
                ray.get(actor.ping.remote(), timeout=1)
            except ray.exceptions.RayActorError:
                continue
            return False
        return True

    wait_for_condition(_all_actors_dead, timeout=10)
