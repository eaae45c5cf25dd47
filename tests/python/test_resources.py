"""Placement by resources on one node: CPUs, declared GPUs (no real GPU
needed), custom resources, CUDA_VISIBLE_DEVICES, and requests that no node
can satisfy."""
import os
import time

import pytest

import phalanx
from conftest import wait_until


@pytest.fixture
def gpu_node(fresh_cluster):
    return fresh_cluster(num_cpus=4, num_gpus=2, resources={"sim": 2},
                         _system_config={"infeasible_timeout_ms": 1500})


@phalanx.remote(num_gpus=1)
def visible_gpus():
    time.sleep(0.3)
    return os.environ.get("CUDA_VISIBLE_DEVICES"), phalanx.get_gpu_ids()


def test_gpu_tasks_see_exactly_their_gpu(gpu_node):
    results = phalanx.get([visible_gpus.remote() for _ in range(4)])
    for env, ids in results:
        assert env == ",".join(map(str, ids)) and len(ids) == 1
    # Two at a time on two GPUs: both GPUs were used.
    assert {r[1][0] for r in results} == {0, 1}


def test_cpu_task_after_gpu_task_sees_no_gpu(gpu_node):
    @phalanx.remote(num_cpus=4)  # all CPUs: runs alone, on some worker that ran GPU tasks before
    def env():
        return os.environ.get("CUDA_VISIBLE_DEVICES"), phalanx.get_gpu_ids()
    phalanx.get([visible_gpus.remote() for _ in range(2)])
    assert phalanx.get(env.remote()) == (None, [])


def test_fractional_gpus_share_one_device(gpu_node):
    @phalanx.remote(num_gpus=0.5)
    def half():
        time.sleep(0.5)
        return phalanx.get_gpu_ids()
    ids = phalanx.get([half.remote() for _ in range(4)])
    assert all(len(i) == 1 for i in ids)
    assert sorted(i[0] for i in ids) == [0, 0, 1, 1]


def test_two_gpu_actor_holds_both(gpu_node):
    @phalanx.remote(num_gpus=2)
    class Trainer:
        def gpus(self):
            return phalanx.get_gpu_ids(), os.environ["CUDA_VISIBLE_DEVICES"]
    t = Trainer.remote()
    assert phalanx.get(t.gpus.remote()) == ([0, 1], "0,1")
    # Calls that come straight from the caller (not through the raylet) name no
    # GPUs; the actor keeps its own for each of them.
    assert phalanx.get([t.gpus.remote() for _ in range(50)]) == [([0, 1], "0,1")] * 50
    # While it lives, a 1-GPU task waits; once killed, the task runs.
    ref = visible_gpus.remote()
    ready, _ = phalanx.wait([ref], timeout=1.0)
    assert ready == []
    phalanx.kill(t)
    assert phalanx.get(ref, timeout=30)[1] in ([0], [1])


def test_custom_resources_limit_concurrency(gpu_node):
    @phalanx.remote(num_cpus=0, resources={"sim": 1})
    def sim_step():
        start = time.monotonic()
        time.sleep(0.4)
        return start, time.monotonic()
    spans = phalanx.get([sim_step.remote() for _ in range(4)])
    # sim: 2 -> never more than two at once.
    for t in [s for s, _ in spans]:
        assert sum(1 for s, e in spans if s <= t < e) <= 2


def test_infeasible_request_warns_then_fails(gpu_node, capfd):
    @phalanx.remote(num_gpus=4)
    def greedy():
        return 1
    ref = greedy.remote()
    with pytest.raises(phalanx.InfeasibleError, match=r"GPU: 4.*no node has that much"):
        phalanx.get(ref, timeout=30)
    assert "warning" in capfd.readouterr().err
    # Other work is not held back by it.
    assert phalanx.get(visible_gpus.remote(), timeout=30)[1] in ([0], [1])


def test_infeasible_actor_dies_with_reason(gpu_node):
    @phalanx.remote(resources={"tpu": 1})
    class NeedsTpu:
        def ping(self):
            return 1
    a = NeedsTpu.remote()
    with pytest.raises(phalanx.ActorDiedError, match="tpu"):
        phalanx.get(a.ping.remote(), timeout=30)


def test_resource_options_are_validated():
    frac = phalanx.remote(num_gpus=1.5)(lambda: 0)  # (taken: Ray refuses it at .remote())
    with pytest.raises(ValueError, match="num_gpus is 1.5: GPU is a unit-instance resource"):
        frac.remote()
    with pytest.raises(ValueError, match="resources"):
        phalanx.remote(resources={"CPU": 1})(lambda: 0)
    with pytest.raises(ValueError, match="memory"):
        phalanx.remote(memory=-1)(lambda: 0)


def test_gpu_fractions_adding_up_to_a_whole_gpu_do_not_make_one(gpu_node, tmp_path):
    # A holds 0.4 of GPU 0; B takes 0.7 of GPU 1 and C the last 0.3 of it.
    # When B ends, 1.3 GPUs are free in total but no whole GPU: D (1 GPU)
    # must wait for A or C, and the raylet must not trip over the difference.
    # Each is submitted once the one before it runs (it writes `started`).
    @phalanx.remote(num_gpus=0.4)
    def a(started):
        open(started, "w").close()
        time.sleep(2.5)
        return phalanx.get_gpu_ids()

    @phalanx.remote(num_gpus=0.7)
    def b(started):
        open(started, "w").close()
        time.sleep(0.5)
        return phalanx.get_gpu_ids()

    @phalanx.remote(num_gpus=0.3)
    def c(started):
        open(started, "w").close()
        time.sleep(2.5)
        return phalanx.get_gpu_ids()

    marks = [str(tmp_path / name) for name in ("a", "b", "c")]
    ra = a.remote(marks[0])
    wait_until(lambda: os.path.exists(marks[0]), what="a to start")
    rb = b.remote(marks[1])
    wait_until(lambda: os.path.exists(marks[1]), what="b to start")
    rc = c.remote(marks[2])
    wait_until(lambda: os.path.exists(marks[2]), what="c to start")
    rd = visible_gpus.remote()
    assert phalanx.get(rb, timeout=30) == [1]
    assert phalanx.get([ra, rc], timeout=30) == [[0], [1]]
    assert phalanx.get(rd, timeout=30)[1] in ([0], [1])


def test_cuda_visible_devices_set_before_init_decides_the_gpu_ids_as_in_ray(fresh_cluster, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")  # the node may use these three GPUs
    fresh_cluster(num_cpus=3, num_gpus=3)

    @phalanx.remote(num_gpus=1)
    def one():
        time.sleep(0.2)
        return phalanx.get_gpu_ids(), os.environ["CUDA_VISIBLE_DEVICES"]

    @phalanx.remote(num_gpus=2)
    def two():
        return phalanx.get_gpu_ids(), os.environ["CUDA_VISIBLE_DEVICES"]

    ones = phalanx.get([one.remote() for _ in range(6)], timeout=60)
    for ids, env in ones:
        assert len(ids) == 1 and ids[0] in ("4", "5", "6") and env == ids[0]  # Ray gives those names, as str
    assert {ids[0] for ids, _ in ones} == {"4", "5", "6"}
    ids, env = phalanx.get(two.remote(), timeout=60)
    assert len(set(ids)) == 2 and set(ids) <= {"4", "5", "6"} and env == ",".join(ids)


def test_tasks_of_fractional_cpus_run_as_many_at_once_as_fit_as_in_ray(fresh_cluster):
    fresh_cluster(num_cpus=2)

    @phalanx.remote(num_cpus=0)
    class Gate:
        def __init__(self):
            self.n = 0

        def arrive(self):
            self.n += 1

        def arrived(self):
            return self.n

    @phalanx.remote(num_cpus=0.5)
    def half(gate):
        phalanx.get(gate.arrive.remote())
        while phalanx.get(gate.arrived.remote()) < 4:  # until all four run at once
            time.sleep(0.01)
        return os.getpid()

    gate = Gate.remote()
    assert len(set(phalanx.get([half.remote(gate) for _ in range(4)], timeout=60))) == 4


def test_accelerator_type_places_work_on_a_node_of_that_type_as_in_ray(fresh_cluster):
    from phalanx.util.accelerators import NVIDIA_A100, NVIDIA_TESLA_V100
    fresh_cluster(num_cpus=2, resources={"accelerator_type:V100": 1},
                  _system_config={"infeasible_timeout_ms": 1500})

    @phalanx.remote
    def where():
        return phalanx.get_runtime_context().get_assigned_resources()

    got = phalanx.get(where.options(accelerator_type=NVIDIA_TESLA_V100).remote(), timeout=60)
    assert got.get("accelerator_type:V100") == pytest.approx(0.001)
    with pytest.raises(phalanx.exceptions.InfeasibleError):  # no A100 node here
        phalanx.get(where.options(accelerator_type=NVIDIA_A100).remote(), timeout=60)
    with pytest.raises(ValueError, match="accelerator type name"):
        where.options(accelerator_type=7)
