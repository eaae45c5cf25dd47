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
