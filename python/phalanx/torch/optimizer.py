"""DistributedOptimizer and broadcast_parameters: Horovod's data-parallel
training on a phalanx static group (init_group), over the object layer.

    phalanx.collective.init_group(world, rank, "train")
    model = Net()
    phalanx.torch.broadcast_parameters(model.state_dict(), root_rank=0, group_name="train")
    opt = phalanx.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters(), group_name="train")
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # gradients are averaged over the ranks as backward makes them
        opt.step()

How it works:

  - at construction the ranks check that they hold the same parameters
    (names, shapes, dtypes: a difference is a ValueError naming the
    parameter and the ranks) and, with a codec, measure the link and the
    codec, agree on the figures (averaged over the ranks, so every rank
    makes the same choices) and let the cost model decide, bucket by bucket (`report()` says per tensor
    what was chosen for its bucket, and the predicted times);
  - the gradients are packed into buckets of up to `fusion_threshold`
    bytes (default 64 MiB; 0: one collective per tensor) in the reverse
    order of the parameters, the order backward makes them; a compressed
    bucket is encoded whole (one collective, error feedback per bucket);
  - a hook on each parameter marks its gradient ready; a communication
    thread takes the buckets in a fixed order (every rank calls the same
    collectives in the same order), each as soon as all its gradients are
    ready, while backward goes on: communication overlaps computation;
  - `step()` waits for the last bucket, writes the averaged gradients back
    and steps the wrapped optimizer.

One backward per step (no gradient accumulation across backward calls);
the group must not be used by other calls while a step is in flight."""
import queue
import threading
import time

import numpy as np
import torch

from phalanx._private import collective_group as _group
from phalanx.exceptions import CollectiveError
from phalanx.torch.compression import CostModel, ErrorFeedback, check_codec, encode, make_codec, measure_codec

DEFAULT_FUSION = 64 << 20


def _named(named_parameters, optimizer):
    """[(name, parameter)] in the optimizer's order, named when the caller said how."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    names = {}
    if named_parameters is not None:
        for name, p in named_parameters:
            names[id(p)] = name
    seen, out = set(), []
    for i, p in enumerate(params):
        if id(p) in seen:
            continue
        seen.add(id(p))
        out.append((names.get(id(p), f"param.{i}"), p))
    return out


def _agree_bytes(blob, group_name, timeout):
    """Every rank's `blob` (bytes), by two allgathers (the length, then the padded bytes)."""
    g = _group._group(group_name)
    n = np.array([len(blob)], np.int64)
    lens = [np.zeros(1, np.int64) for _ in range(g.world_size)]
    _group.group_allgather(lens, n, group_name, timeout)
    size = int(max(x[0] for x in lens))
    mine = np.zeros(size, np.uint8)
    mine[:len(blob)] = np.frombuffer(blob, np.uint8)
    out = [np.zeros(size, np.uint8) for _ in range(g.world_size)]
    _group.group_allgather(out, mine, group_name, timeout)
    return [bytes(o[:int(x[0])]) for o, x in zip(out, lens)]


def _check_same_parameters(named, group_name, timeout):
    import pickle
    mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in named]
    every = [pickle.loads(b) for b in _agree_bytes(pickle.dumps(mine), group_name, timeout)]
    for r, theirs in enumerate(every):
        if theirs == every[0]:
            continue
        if len(theirs) != len(every[0]):
            raise ValueError(f"DistributedOptimizer (group '{group_name}'): rank {r} has {len(theirs)} parameters, "
                             f"rank 0 has {len(every[0])}; every rank must wrap the same model")
        for a, b in zip(every[0], theirs):
            if a != b:
                raise ValueError(f"DistributedOptimizer (group '{group_name}'): parameter {a[0]!r} is {a[2]} "
                                 f"{list(a[1])} on rank 0 but rank {r} has {b[0]!r} {b[2]} {list(b[1])}; every "
                                 "rank must wrap the same model")


class _Slot:
    """One collective: the parameters it carries, and how."""

    def __init__(self, params, codec):
        self.params, self.codec = params, codec  # [(name, parameter)]
        self.key = params[0][0]  # (its error feedback's)
        self.numel = sum(p.numel() for _, p in params)
        self.waiting = set()
        self.ready = threading.Event()


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps `optimizer` so that each step uses the gradients averaged over
    every rank of `group_name`. `compression`: one of CODECS; with
    `cost_model=True` (default) a bucket (a tensor, without fusion) is
    compressed only where the cost model predicts that it pays on the
    measured link, with False always.
    `fusion_threshold`: bytes per bucket of raw tensors (0: no fusion).
    `timeout`: seconds any collective may take (None: for ever)."""

    def __init__(self, optimizer, named_parameters=None, group_name="default", compression="none",
                 fusion_threshold=DEFAULT_FUSION, cost_model=True, topk_ratio=0.01, timeout=300.0):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"DistributedOptimizer wraps a torch.optim.Optimizer, got {type(optimizer).__name__}")
        check_codec(compression)
        if fusion_threshold < 0:
            raise ValueError(f"fusion_threshold must be >= 0 bytes, got {fusion_threshold}")
        self.optimizer, self.group_name, self.timeout = optimizer, group_name, timeout
        g = _group._group(group_name)
        self.world, self.rank = g.world_size, g.rank
        named = _named(named_parameters, optimizer)
        for name, p in named:
            if p.dtype not in (torch.float16, torch.float32, torch.float64, torch.bfloat16):
                raise TypeError(f"DistributedOptimizer: parameter {name!r} is {p.dtype}; gradients are averaged "
                                "only for floating-point parameters")
            if p.device.type != "cpu":
                raise ValueError(f"DistributedOptimizer: parameter {name!r} is on {p.device}; this group runs "
                                 "over the object layer, which takes CPU tensors")
        _check_same_parameters(named, group_name, timeout)
        self.codec = make_codec(compression, topk_ratio)
        self.feedback = ErrorFeedback()
        self.choices = []  # per tensor: what the cost model chose (report())
        # the buckets in the order backward makes the gradients: the reverse of the parameters
        buckets, bucket, size = [], [], 0
        for name, p in reversed(named):
            nbytes = 4 * p.numel()
            if bucket and size + nbytes > fusion_threshold:
                buckets.append(bucket)
                bucket, size = [], 0
            bucket.append((name, p))
            size += nbytes
        if bucket:
            buckets.append(bucket)
        # each bucket compressed or not: one decision per collective (per tensor without fusion)
        raw_codec = make_codec("none")
        model = self.measure() if compression != "none" and cost_model else None
        self.slots = []
        for i, b in enumerate(buckets):
            numel = sum(p.numel() for _, p in b)
            use, raw, comp = compression != "none", float("nan"), float("nan")
            if model is not None:
                use, raw, comp = model.choose(self.codec, numel)
            self.slots.append(_Slot(b, self.codec if use else raw_codec))
            for name, p in b:
                self.choices.append({"name": name, "numel": p.numel(), "bucket": i, "bucket_numel": numel,
                                     "codec": self.codec.name if use else "none", "raw_ms": 1000 * raw,
                                     "compressed_ms": 1000 * comp})
        self.slot_of = {id(p): s for s in self.slots for _, p in s.params}
        self.hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for _, p in named if p.requires_grad]
        self.results, self.round, self.lock = queue.Queue(), None, threading.Lock()
        self.stats = {"steps": 0, "comm_s": 0.0, "wait_s": 0.0, "bytes_sent": 0}
        # (not super().__init__: the wrapped optimizer owns param_groups and state)

    # torch.optim.Optimizer's surface, forwarded
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def defaults(self):
        return self.optimizer.defaults

    @property
    def state(self):
        return self.optimizer.state

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, sd):
        self.optimizer.load_state_dict(sd)

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __repr__(self):
        return (f"DistributedOptimizer({type(self.optimizer).__name__}, group '{self.group_name}', rank "
                f"{self.rank}/{self.world}, {len(self.slots)} collectives, codec {self.codec.name})")

    def measure(self):
        """The cost model from the link and the codec, measured here and
        averaged over the ranks (every rank then decides alike)."""
        small, big = np.zeros(1, np.float32), np.zeros(4 << 20, np.float32)  # 4 B and 16 MiB
        times = {"small": [], "big": [], "gather": []}
        gathered = [np.zeros(1, np.float32) for _ in range(self.world)]
        for _ in range(2):
            for kind, a in (("small", small), ("big", big)):
                t0 = time.perf_counter()
                _group.group_allreduce(a, "sum", self.group_name, self.timeout)
                times[kind].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _group.group_allgather(gathered, small, self.group_name, self.timeout)
            times["gather"].append(time.perf_counter() - t0)
        latency = min(times["small"])
        ring = 2 * (self.world - 1) / self.world * big.nbytes
        per_byte = max(1e-12, (min(times["big"]) - latency) / ring)
        figures = np.array([latency, per_byte, min(times["gather"]), *measure_codec(self.codec)], np.float64)
        _group.group_allreduce(figures, "sum", self.group_name, self.timeout)
        latency, per_byte, gather, *speed = figures / self.world
        self.link = {"latency_ms": 1000 * latency, "gather_latency_ms": 1000 * gather,
                     "bandwidth_MBps": 1e-6 / per_byte}
        return CostModel(self.world, latency, 1.0 / per_byte, {self.codec.name: tuple(speed)}, gather)

    def report(self):
        """Per tensor: the codec chosen, and the predicted raw and compressed times."""
        return list(self.choices)

    def _grad_ready(self, p):
        with self.lock:
            if self.round is None:  # the first gradient of a backward: a new round of collectives
                self._start()
            s = self.slot_of[id(p)]
            s.waiting.discard(id(p))
            if not s.waiting:
                s.ready.set()

    def _start(self):
        for s in self.slots:
            s.waiting = {id(p) for _, p in s.params if p.requires_grad}
            s.ready.clear()
            if not s.waiting:
                s.ready.set()
        self.round = threading.Thread(target=self._communicate, name="phalanx-allreduce", daemon=True)
        self.round.start()

    def _communicate(self):
        """The slots in order, each once its gradients are ready: averaged in place."""
        try:
            for s in self.slots:
                if not s.ready.wait(self.timeout):
                    missing = [n for n, p in s.params if id(p) in s.waiting]
                    raise CollectiveError(f"DistributedOptimizer: no gradient for {', '.join(missing[:3])} and no "
                                          f"step() within {self.timeout} s of the first gradient")
                t0 = time.perf_counter()
                self._reduce(s)
                self.stats["comm_s"] += time.perf_counter() - t0
            self.results.put(None)
        except BaseException as e:  # handed to step()
            self.results.put(e)

    def _reduce(self, s):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for _, p in s.params]
        flat = torch.cat([g.detach().reshape(-1).to(torch.float32) for g in grads])
        c = s.codec
        payload = encode(c, flat, self.feedback, s.key)[0].contiguous()
        self.stats["bytes_sent"] += payload.numel() * payload.element_size()
        if c.summable:
            _group.group_allreduce(payload, "sum", self.group_name, self.timeout)
            total = c.decode(payload, flat.numel())
        else:
            every = [torch.empty_like(payload) for _ in range(self.world)]
            _group.group_allgather(every, payload, self.group_name, self.timeout)
            total = sum(c.decode(x, flat.numel()) for x in every)
        total /= self.world
        i = 0
        for (_, p), g in zip(s.params, grads):
            n = p.numel()
            part = total[i:i + n].view(p.shape).to(p.dtype)
            if p.grad is None:
                p.grad = part.clone()
            else:
                p.grad.copy_(part)
            i += n

    def synchronize(self):
        """Waits until every gradient of this step is averaged."""
        with self.lock:
            if self.round is None:
                self._start()  # (backward made no gradient here: take part with zeros, as the others expect)
            for s in self.slots:  # backward is over: a parameter it gave no gradient takes part with zeros
                s.ready.set()
        t0 = time.perf_counter()
        error = self.results.get()
        self.round = None
        self.stats["wait_s"] += time.perf_counter() - t0
        if error is not None:
            raise error

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("DistributedOptimizer.step takes no closure (run forward and backward first)")
        self.synchronize()
        self.stats["steps"] += 1
        return self.optimizer.step()

    def close(self):
        """Removes the gradient hooks (the wrapped optimizer goes on alone)."""
        for h in self.hooks:
            h.remove()
        self.hooks = []


def broadcast_parameters(params, root_rank=0, group_name="default", timeout=300.0):
    """Sets every rank's tensors to root_rank's: `params` a state_dict, or
    (name, tensor) pairs such as model.named_parameters(). In a fixed order
    (sorted by name), one collective per dtype (tensors fused)."""
    items = sorted(params.items() if hasattr(params, "items") else list(params), key=lambda kv: kv[0])
    tensors = [(n, t) for n, t in items if isinstance(t, torch.Tensor)]
    by_dtype = {}
    for n, t in tensors:
        if t.device.type != "cpu":
            raise ValueError(f"broadcast_parameters: {n!r} is on {t.device}; this group takes CPU tensors")
        by_dtype.setdefault(t.dtype, []).append((n, t))
    for dtype in sorted(by_dtype, key=str):
        group = by_dtype[dtype]
        flat = torch.cat([t.detach().reshape(-1) for _, t in group]).contiguous()
        _group.group_broadcast(flat, root_rank, group_name, timeout)
        i = 0
        with torch.no_grad():
            for _, t in group:
                t.copy_(flat[i:i + t.numel()].view(t.shape))
                i += t.numel()
