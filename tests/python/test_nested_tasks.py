"""Tasks that block in get on tasks they submitted, on few CPUs (issue 36).

Ray's documentation, docs.ray.io/en/latest/ray-core/tasks/nested-tasks.html ("Yielding Resources While
Blocked"): a task blocked in get or wait gives its CPU back while it waits. What then decides how nested
work runs is what the node serves next: the children a blocked parent waits for, or yet another parent,
which takes a worker process of its own and blocks in turn. The raylet serves deeper tasks first
(TaskSpec.depth, scheduler/task_manager.h), so the children go first: 300 parents on 1 CPU ran in
300 worker processes and 41 s before, in a few workers and under a second after
(bench/nested_blocking.py). The test asserts the workers, not the time."""
import phalanx


@phalanx.remote
def child(i):
    return i


@phalanx.remote
def parent(i):
    return phalanx.get(child.remote(i))


@phalanx.remote
def grandparent(i):
    return phalanx.get(parent.remote(i)) * 2


def test_nested_blocking_tasks_on_one_cpu_run_in_a_few_workers(fresh_cluster):
    fresh_cluster(num_cpus=1)
    assert phalanx.get([parent.remote(i) for i in range(300)], timeout=240) == list(range(300))
    workers = phalanx.cluster_stats()["workers"]
    assert workers <= 20, f"{workers} workers for 300 nested tasks on 1 CPU: the children should go first"


def test_three_levels_deep_on_one_cpu(fresh_cluster):
    fresh_cluster(num_cpus=1)
    assert phalanx.get([grandparent.remote(i) for i in range(100)], timeout=240) == [2 * i for i in range(100)]
    workers = phalanx.cluster_stats()["workers"]
    assert workers <= 20, f"{workers} workers for 100 trees of three on 1 CPU"


@phalanx.remote(num_cpus=0)
class Relay:
    """Runs `child` (1 CPU) for its caller: the caller's CPU is the only one."""

    def run(self, i):
        return phalanx.get(child.remote(i), timeout=60)


@phalanx.remote
def through_actor(relay, i):
    return phalanx.get(relay.run.remote(i), timeout=60)  # a direct actor call: its result comes to this worker


def test_a_task_blocked_on_its_direct_actor_call_lends_its_cpu(fresh_cluster):
    """The task's get sleeps in its own worker (the actor's result comes straight there, not through the
    raylet): it tells the raylet (WORKER_BLOCKED), which lends its one CPU to the task the actor submits.
    Before, the task kept its CPU and the three waited on each other until the get's timeout."""
    fresh_cluster(num_cpus=1)
    relay = Relay.remote()
    assert phalanx.get([through_actor.remote(relay, i) for i in range(3)], timeout=60) == [0, 1, 2]
