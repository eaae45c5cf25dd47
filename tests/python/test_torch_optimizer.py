"""phalanx.torch: the compression codecs and their error feedback, the cost
model's choices, and DistributedOptimizer / broadcast_parameters on ranks
that are actors of a real cluster (the fusion buffer with many odd-sized
tensors, the average against one computed here, ranks that disagree)."""
import sys

import numpy as np
import pytest

import phalanx

torch = pytest.importorskip("torch")
import cloudpickle  # noqa: E402

import phalanx.torch as pt  # noqa: E402
from phalanx.torch import compression  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("codec", pt.CODECS)
def test_codec_round_trip(codec):
    g = torch.randn(1001, generator=torch.Generator().manual_seed(0))
    payload, decoded = pt.compress(g, codec)
    assert decoded.shape == g.shape
    c = pt.make_codec(codec)
    assert payload.numel() * payload.element_size() == c.payload_bytes(g.numel())
    if codec == "none":
        assert torch.equal(decoded, g)
    elif codec == "fp16":
        torch.testing.assert_close(decoded, g, rtol=1e-3, atol=1e-3)
    elif codec == "topk":  # the 10 largest magnitudes (1%), exactly, and nothing else
        kept = decoded != 0
        assert int(kept.sum()) == 10
        assert torch.equal(decoded[kept], g[kept])
        assert float(g[~kept].abs().max()) <= float(g[kept].abs().min())
    else:  # onebit: the signs times the mean magnitude
        scale = float(g.abs().mean())
        torch.testing.assert_close(decoded, torch.where(g >= 0, scale, -scale))


def test_topk_indices_survive_as_float32_bits():
    """The indices travel as the bits of float32 values (most are
    denormals): they must come back exactly, also at the high end."""
    g = torch.zeros(1 << 20)
    g[[0, 1, 5, 77_777, (1 << 20) - 1]] = torch.tensor([3.0, -4.0, 5.0, -6.0, 7.0])
    payload, decoded = pt.compress(g, compression.TopK(ratio=5 / (1 << 20)))
    assert torch.equal(decoded, g)
    assert torch.equal(compression.TopK().decode(payload.clone(), g.numel()), g)


@pytest.mark.parametrize("codec", ["topk", "onebit"])
def test_error_feedback_keeps_what_compression_dropped(codec):
    """Sent over the steps plus the residual is exactly what went in: a
    gradient component too small to be sent once is sent later."""
    gen = torch.Generator().manual_seed(3)
    fb = pt.ErrorFeedback()
    total_in, total_sent = torch.zeros(500, dtype=torch.float64), torch.zeros(500, dtype=torch.float64)
    for _ in range(40):
        g = torch.randn(500, generator=gen)
        _, sent = pt.compress(g, codec, feedback=fb, key="w")
        total_in += g.double()
        total_sent += sent.double()
    torch.testing.assert_close(total_sent + fb.residual["w"].double(), total_in, rtol=0, atol=1e-3)
    # and the residual stays bounded (it is sent, not hoarded)
    assert float(fb.residual["w"].abs().max()) < 40


def test_compression_of_an_integer_tensor_is_a_clear_error():
    with pytest.raises(TypeError, match=r"counts is torch.int64: compression takes floating-point"):
        pt.compress(torch.arange(10), "fp16", key="counts")


def test_the_cost_model_compresses_only_where_it_pays():
    # (encode per call, per element, decode per call, per element): figures of this machine's order
    speed = {"topk": (30e-6, 5e-9, 20e-6, 1e-9), "fp16": (5e-6, 1e-9, 5e-6, 1e-9),
             "onebit": (40e-6, 3e-9, 40e-6, 3e-9)}
    slow = pt.CostModel(world=4, latency=1e-3, bandwidth=125e6, codec_speed=speed)  # 1 Gbit/s
    fast = pt.CostModel(world=4, latency=1e-4, bandwidth=20e9, codec_speed=speed)  # loopback, memory speed
    big, tiny = 4 << 20, 64
    for name in ("fp16", "topk", "onebit"):
        c = pt.make_codec(name)
        use, raw, comp = slow.choose(c, big)
        assert use and comp < raw, (name, raw, comp)
        assert not fast.choose(c, big)[0], name  # encoding costs more than the bytes it saves
        assert not slow.choose(c, tiny)[0], name  # a tiny tensor: latency either way, encoding on top
        # a near tie goes to sending raw: compressing must be predicted faster by the margin
        gain = 1 - comp / raw
        assert pt.CostModel(4, 1e-3, 125e6, speed, margin=gain - 0.01).choose(c, big)[0]
        assert not pt.CostModel(4, 1e-3, 125e6, speed, margin=gain + 0.01).choose(c, big)[0]
    # an allgather measured quicker than the allreduce (noise on a busy machine) wins no tiny tensor
    noisy = pt.CostModel(world=2, latency=1e-3, bandwidth=125e6, codec_speed=speed, gather_latency=1e-4)
    for name in ("topk", "onebit"):
        assert not noisy.choose(pt.make_codec(name), 5)[0], name


@phalanx.remote
class Rank:
    def __init__(self, world, rank, group, sizes, seed):
        import phalanx.torch as pt  # noqa: F811
        torch.manual_seed(seed)
        phalanx.collective.init_group(world, rank, group, timeout=60)
        self.rank, self.group = rank, group
        self.params = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(s)) for s in sizes])
        self.pt = pt

    def broadcast(self):
        self.pt.broadcast_parameters(dict(self.params.named_parameters()), root_rank=0, group_name=self.group)
        return [p.detach().clone() for p in self.params]

    def train(self, steps, fusion, codec="none", cost_model=True):
        """`steps` SGD steps on loss = sum(w * x) with this rank's x: each
        gradient is x, so the averaged one is the mean of the ranks' x."""
        opt = self.pt.DistributedOptimizer(torch.optim.SGD(self.params.parameters(), lr=0.5),
                                           named_parameters=self.params.named_parameters(), group_name=self.group,
                                           fusion_threshold=fusion, compression=codec, cost_model=cost_model,
                                           timeout=60)
        grads = []
        for step in range(steps):
            gen = torch.Generator().manual_seed(1000 * step + self.rank)
            xs = [torch.randn(p.shape, generator=gen) for p in self.params]
            opt.zero_grad()
            sum((p * x).sum() for p, x in zip(self.params, xs)).backward()
            opt.step()
            grads.append([p.grad.clone() for p in self.params])
        out = {"buckets": len(opt.slots), "grads": grads, "params": [p.detach().clone() for p in self.params],
               "report": opt.report(), "bytes": opt.stats["bytes_sent"]}
        opt.close()
        return out

    def wrong_model(self, shape):
        self.params.append(torch.nn.Parameter(torch.zeros(shape)))
        try:
            self.pt.DistributedOptimizer(torch.optim.SGD(self.params.parameters(), lr=0.1),
                                         named_parameters=self.params.named_parameters(), group_name=self.group,
                                         timeout=30)
            return "accepted"
        except ValueError as e:
            return str(e)


# odd sizes, some tiny, one of 0-d: the fusion buffer packs and unpacks every one
SIZES = [(7,), (3, 5), (), (1,), (129,), (4, 4, 3), (1023,), (2, 1), (5000,), (11, 13), (2,), (333,)]


def expected_grads(world, steps):
    out = []
    for step in range(steps):
        per_rank = []
        for r in range(world):
            gen = torch.Generator().manual_seed(1000 * step + r)
            per_rank.append([torch.randn(s, generator=gen) for s in SIZES])
        out.append([sum(xs) / world for xs in zip(*per_rank)])
    return out


@pytest.mark.parametrize("fusion", [0, 1000, pt.DEFAULT_FUSION])
def test_distributed_optimizer_averages_many_odd_sized_gradients(cluster, fusion):
    group = f"fusion{fusion}"
    ranks = [Rank.remote(2, r, group, SIZES, seed=r) for r in range(2)]
    start = phalanx.get([r.broadcast.remote() for r in ranks], timeout=120)
    for a, b in zip(*start):  # rank 1's random start is now rank 0's
        assert torch.equal(a, b)
    out = phalanx.get([r.train.remote(3, fusion) for r in ranks], timeout=120)
    want = {0: len(SIZES), 1000: 6, pt.DEFAULT_FUSION: 1}[fusion]
    assert out[0]["buckets"] == out[1]["buckets"] == want
    for step, expect in enumerate(expected_grads(2, 3)):
        for r in range(2):
            for got, e in zip(out[r]["grads"][step], expect):
                torch.testing.assert_close(got, e, rtol=1e-5, atol=1e-5)
    for a, b in zip(out[0]["params"], out[1]["params"]):  # the ranks stay in step
        assert torch.equal(a, b)


@pytest.mark.parametrize("codec", ["fp16", "topk", "onebit"])
def test_compressed_gradients_are_averaged_alike_on_every_rank(cluster, codec):
    group = f"codec-{codec}"
    ranks = [Rank.remote(2, r, group, [(4096,), (3,)], seed=0) for r in range(2)]
    out = phalanx.get([r.train.remote(2, 1 << 20, codec, False) for r in ranks], timeout=120)
    for a, b in zip(out[0]["params"], out[1]["params"]):
        assert torch.equal(a, b)  # every rank decodes the same payloads
    assert all(c["codec"] == codec for c in out[0]["report"])  # cost_model=False: always compressed
    raw_bytes = 2 * 4 * (4096 + 3)
    assert out[0]["bytes"] < raw_bytes / 1.9, (out[0]["bytes"], raw_bytes)
    if codec == "fp16":
        expect = expected_grads_of([(4096,), (3,)], 2, 2)
        for got, e in zip(out[0]["grads"][1], expect[1]):
            torch.testing.assert_close(got, e, rtol=2e-3, atol=2e-3)


def expected_grads_of(sizes, world, steps):
    global SIZES
    saved, SIZES = SIZES, sizes
    try:
        return expected_grads(world, steps)
    finally:
        SIZES = saved


def test_the_cost_model_reports_a_choice_per_tensor_on_loopback(cluster):
    ranks = [Rank.remote(2, r, "costs", [(1 << 18,), (5,)], seed=0) for r in range(2)]
    out = phalanx.get([r.train.remote(1, 0, "onebit", True) for r in ranks], timeout=120)  # (a bucket each)
    report = out[0]["report"]
    by_size = {c["numel"]: c for c in report}  # (in bucket order: backward's, the reverse of the parameters)
    assert sorted(by_size) == [5, 1 << 18] and len({c["bucket"] for c in report}) == 2
    assert all(c["raw_ms"] > 0 and c["compressed_ms"] > 0 for c in report)
    assert by_size[5]["codec"] == "none" and by_size[5]["bucket_numel"] == 5  # latency either way: never worth it
    assert out[1]["report"] == report  # every rank decided alike


def test_ranks_with_different_models_get_an_error_naming_the_parameter(cluster):
    ranks = [Rank.remote(2, r, "mismatch", [(3,), (4,)], seed=0) for r in range(2)]
    out = phalanx.get([ranks[0].wrong_model.remote((6,)), ranks[1].wrong_model.remote((7,))], timeout=120)
    for msg in out:
        assert "parameter '2' is torch.float32 [6] on rank 0 but rank 1 has '2' torch.float32 [7]" in msg, msg
