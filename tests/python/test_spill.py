"""Spilling (docs/fault-tolerance.md): when the store is full, objects that
are referenced but not mapped go to disk, least recently used first, and come
back on get, as task arguments, for a copy to another node and for a
reduce; ObjectStoreFullError only when the disk's limit is reached too."""
import glob
import os

import numpy as np
import pytest

import phalanx
from conftest import loopback_nodes, wait_until

MIB = 1 << 20
STORE = 64 * MIB


def _fill(n, mib=8):
    """n objects of `mib` MiB each, object i full of the value i."""
    return [phalanx.put(np.full(mib * MIB // 4, i, dtype=np.float32)) for i in range(n)]


@phalanx.remote(num_cpus=1)
def _total(a):
    return float(a.sum())


def test_puts_past_the_store_spill_and_every_value_comes_back(fresh_cluster, tmp_path):
    fresh_cluster(object_store_memory=STORE, _system_config={"spill_dir": str(tmp_path)})
    refs = _fill(20)  # 160 MiB into a 64 MiB store
    s = phalanx.cluster_stats()
    assert s["spilled_objects"] >= 12 and s["spilled_bytes"] >= 12 * 8 * MIB
    files = glob.glob(str(tmp_path / "*" / "*"))
    assert len(files) == s["spilled_objects"]  # one file each, in the folder asked for
    for i, r in enumerate(refs):  # (the oldest are on disk: each get brings one back, spilling another)
        a = phalanx.get(r, timeout=60)
        assert a.shape == (2 * MIB,) and a[0] == i and a[-1] == i
        del a
    s = phalanx.cluster_stats()
    assert s["restored_total_objects"] >= 12
    # As task arguments (read back before the task runs).
    assert phalanx.get([_total.remote(r) for r in refs], timeout=120) == [float(i * 2 * MIB) for i in range(20)]
    del refs, r
    wait_until(lambda: phalanx.cluster_stats()["spilled_objects"] == 0, what="spilled objects to be freed")
    wait_until(lambda: not glob.glob(str(tmp_path / "*" / "*")), what="spill files to be removed")


def test_a_mapped_object_is_not_spilled(fresh_cluster):
    fresh_cluster(object_store_memory=STORE)
    first = phalanx.put(np.full(2 * MIB, 7, dtype=np.float32))
    view = phalanx.get(first)  # mapped by this process while `view` lives
    rest = _fill(10)
    assert view[0] == 7 and view[-1] == 7
    s = phalanx.cluster_stats()
    assert s["spilled_objects"] >= 3
    # the view's object is still in memory: reading it again needs no restore
    restored = s["restored_total_objects"]
    again = phalanx.get(first)
    assert again[5] == 7
    assert phalanx.cluster_stats()["restored_total_objects"] == restored
    del view, again, rest


def test_disk_limit_gives_object_store_full_with_memory_and_disk_figures(fresh_cluster, tmp_path):
    fresh_cluster(object_store_memory=STORE,
                  _system_config={"spill_dir": str(tmp_path), "spill_max_bytes": 24 * MIB})
    refs = _fill(9)  # 72 MiB: a few spill, within the limit
    with pytest.raises(phalanx.exceptions.ObjectStoreFullError) as e:
        for i in range(10):
            refs.append(phalanx.put(np.full(2 * MIB, 100 + i, dtype=np.float32)))
    msg = str(e.value)
    assert "capacity 64 MiB" in msg and "spill limit is reached" in msg and "limit 24 MiB" in msg, msg
    # nothing was lost: every value stored before the error reads back
    for i, r in enumerate(refs):
        want = i if i < 9 else 100 + i - 9
        a = phalanx.get(r, timeout=60)
        assert a[0] == want and a[-1] == want
        del a


def test_spill_can_be_turned_off(fresh_cluster, tmp_path):
    fresh_cluster(object_store_memory=STORE, _system_config={"spill": 0, "spill_dir": str(tmp_path)})
    refs = _fill(6)
    with pytest.raises(phalanx.exceptions.ObjectStoreFullError, match="object store is full"):
        refs += _fill(4)
    assert phalanx.cluster_stats()["spilled_total_objects"] == 0
    assert not os.listdir(tmp_path)


@phalanx.remote(num_cpus=1, resources={"b": 1})
def _put_on_b(n):
    return [phalanx.put(np.full(2 * MIB, i, dtype=np.float32)) for i in range(n)]


@phalanx.remote(num_cpus=1, resources={"b": 1})
def _stats_of_b():
    return phalanx.cluster_stats()


def test_copy_to_another_node_and_reduce_read_spilled_objects(tmp_path):
    store = ["--object-store-memory", str(STORE), "--spill-dir", str(tmp_path)]
    with loopback_nodes([None, {"b": 1}], extra_args=store):
        refs = phalanx.get(_put_on_b.remote(12), timeout=60)  # 96 MiB put on node b: some spill there
        assert phalanx.get(_stats_of_b.remote(), timeout=30)["spilled_total_objects"] >= 4
        # Node 0 copies each one from b, whose spilled ones are read back to be served.
        for i, r in enumerate(refs):
            a = phalanx.get(r, timeout=60)
            assert a[0] == i and a[-1] == i
            del a
        total = phalanx.collective.reduce(refs, op="sum", timeout=60)
        out = phalanx.get(total, timeout=60)
        assert out[0] == sum(range(12)) and out[-1] == sum(range(12))
