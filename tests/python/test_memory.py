"""Objects are freed when no reference remains anywhere: long loops keep
the store and the raylet's own memory flat."""
import os

import numpy as np

import phalanx
from conftest import node_procs, proc_rss_bytes, wait_until

N_TASKS = int(os.environ.get("PHALANX_TEST_LEAK_TASKS", "200000"))


def test_dropped_put_is_freed(cluster):
    before = phalanx.cluster_stats()["store_used"]
    ref = phalanx.put(np.zeros(10 << 20, dtype=np.uint8))
    assert phalanx.cluster_stats()["store_used"] >= before + (10 << 20)
    del ref
    wait_until(lambda: phalanx.cluster_stats()["store_used"] <= before, what="store to be freed")  # (earlier tests' may go too)


def test_view_keeps_object_alive_after_ref_is_dropped(cluster):
    ref = phalanx.put(np.arange(1 << 20, dtype=np.int64))
    view = phalanx.get(ref)
    del ref
    phalanx.cluster_stats()  # answered after the raylet applied the drop (it goes out first)
    assert int(view[-1]) == (1 << 20) - 1  # still mapped and intact
    used = phalanx.cluster_stats()["store_used"]
    del view
    wait_until(lambda: phalanx.cluster_stats()["store_used"] <= used - (8 << 20), what="view release")


@phalanx.remote(num_cpus=1)
def _first(a):
    return float(a[0])


@phalanx.remote(num_cpus=1, max_retries=0)
def _raises(a):
    raise ValueError("boom")


def test_a_tasks_store_argument_is_let_go_when_the_task_ends(fresh_cluster):
    # A nearly full store: a 40 MiB argument that stayed pinned in the worker
    # after its task (until the worker's next task) left no room for the next.
    fresh_cluster(num_cpus=1, object_store_memory=96 << 20)
    for task in (_first, _raises):
        ref = phalanx.put(np.ones(40 << 20, dtype=np.uint8))
        try:
            phalanx.get(task.remote(ref))
        except phalanx.exceptions.TaskError:
            assert task is _raises
        del ref
        wait_until(lambda: phalanx.cluster_stats()["store_used"] == 0, timeout=10,
                   what=f"the argument of {task._name} to be freed with no task after it")
        big = phalanx.put(np.ones(80 << 20, dtype=np.uint8))  # fits only if the argument is gone
        del big


def test_many_tasks_with_1mb_results_keep_memory_flat(fresh_cluster):
    fresh_cluster(object_store_memory=1 << 30)

    @phalanx.remote
    def one_mb(i):
        return np.full(1 << 18, i, dtype=np.float32)

    raylet_pid = node_procs()["raylet"].pid
    window, samples = [], []
    checkpoint = N_TASKS // 2  # (the first half takes the allocator's warm-up, larger on a loaded machine)
    for i in range(N_TASKS):
        window.append(one_mb.remote(i))
        if len(window) >= 64:
            first = phalanx.get(window[0])
            assert first[0] == i - 63
            del window[:32], first
        if i == checkpoint or i == N_TASKS - 1:
            samples.append((proc_rss_bytes(raylet_pid), phalanx.cluster_stats()))
    del window  # the last tasks may still be running: their results are freed as they land

    def all_freed():
        s = phalanx.cluster_stats()
        return (s["tasks_running"], s["tasks_queued"], s["store_used"], s["store_objects"],
                s["ref_entries"], s["inline_objects"]) == (0, 0, 0, 0, 0, 0)
    wait_until(all_freed, what="every result to be freed")
    (rss_early, s_early), (rss_late, s_late) = samples
    # The store never held more than the window of live results.
    assert s_late["store_used"] <= 80 << 20 and s_early["store_used"] <= 80 << 20
    # The raylet's own memory does not grow with the number of tasks run.
    assert rss_late - rss_early < 32 << 20, (rss_early, rss_late)
