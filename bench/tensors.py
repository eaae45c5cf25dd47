"""CPU torch tensors against numpy arrays of the same bytes in one process: put, get, get + sum,
torch's own pickling, and the raylet's reduce (docs/gpu.md). .venv/bin/python bench/tensors.py"""
import pickle
import statistics
import time

import torch

import phalanx

phalanx.init(num_cpus=2, object_store_memory=4 << 30)
def timed(f, n):
    ts = []
    for _ in range(5):
        t0 = time.perf_counter(); [f() for _ in range(n)]; ts.append((time.perf_counter() - t0) / n)
    return statistics.median(ts)
rows = []
for mib in [1, 64, 512]:
    t = torch.ones(mib << 18)  # float32
    a = t.numpy()
    n = 20 if mib < 512 else 3
    put_t = timed(lambda: phalanx.put(t), n); put_a = timed(lambda: phalanx.put(a), n)
    rt, ra = phalanx.put(t), phalanx.put(a)
    get_t = timed(lambda: phalanx.get(rt), 50); get_a = timed(lambda: phalanx.get(ra), 50)
    def get_sum(r): return float(phalanx.get(r).sum())
    sum_t = timed(lambda: get_sum(rt), 3); sum_a = timed(lambda: get_sum(ra), 3)
    pk = timed(lambda: pickle.loads(pickle.dumps(t)), n)  # torch's own pickling, for comparison
    rows.append((mib, put_t * 1e3, put_a * 1e3, mib / 1024 / put_t, get_t * 1e6, get_a * 1e6, sum_t * 1e3, sum_a * 1e3, pk * 1e3))
print("| MiB | put tensor ms | put numpy ms | put tensor GB/s | get tensor us | get numpy us | get+sum tensor ms | get+sum numpy ms | pickle round trip ms |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| %d | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |" % r)
# reduce of 8 x 64 MiB inputs, tensor vs numpy vs torch's own sum
ts = [torch.full((16 << 20,), float(i)) for i in range(8)]
rt = [phalanx.put(x) for x in ts]; ra = [phalanx.put(x.numpy()) for x in ts]
red_t = timed(lambda: phalanx.get(phalanx.collective.reduce(rt)), 3)
red_a = timed(lambda: phalanx.get(phalanx.collective.reduce(ra)), 3)
def torch_sum():
    acc = ts[0].clone()
    for x in ts[1:]: acc += x
    return acc
tsum = timed(torch_sum, 3)
bt = [x.to(torch.bfloat16) for x in ts]; rb = [phalanx.put(x) for x in bt]
red_b = timed(lambda: phalanx.get(phalanx.collective.reduce(rb)), 3)
print(f"\nreduce of 8 x 64 MiB float32: tensors {red_t*1e3:.0f} ms, numpy {red_a*1e3:.0f} ms, torch's own sum in this process {tsum*1e3:.0f} ms; 8 x 32 MiB bfloat16 tensors {red_b*1e3:.0f} ms")
phalanx.shutdown()
