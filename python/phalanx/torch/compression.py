"""Gradient compression for DistributedOptimizer: the codecs, their error
feedback, and the cost model that says, tensor by tensor, whether
compressing pays on the link measured (HiPress, SOSP 2021: compression
helps only where encode + a smaller transfer + decode beats sending raw).

Codecs (`CODECS`):

  none    the float32 tensor, summed by allreduce
  fp16    halved to float16, summed by allreduce in float16 (no feedback)
  topk    the `ratio` largest magnitudes with their indices; the ranks'
          pairs are allgathered and each rank adds them up; what was left
          out is kept (error feedback) and added to the next gradient
  onebit  the signs, 8 to a byte, and one scale (the mean magnitude); the
          ranks' bits are allgathered; error feedback as for topk

Every codec takes float16/32/64 and bfloat16 tensors; an integer tensor is
a TypeError naming it (there is no gradient of an integer)."""
import time

import numpy as np
import torch

CODECS = ("none", "fp16", "topk", "onebit")
FLOATS = (torch.float16, torch.float32, torch.float64, torch.bfloat16)


def check_codec(name):
    if name not in CODECS:
        raise ValueError(f"unknown compression {name!r} (expected one of {', '.join(CODECS)})")
    return name


def check_float(tensor, name="tensor"):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name}: compression takes a torch tensor, got {type(tensor).__name__}")
    if tensor.dtype not in FLOATS:
        raise TypeError(f"{name} is {tensor.dtype}: compression takes floating-point tensors (gradients), "
                        "not integers or booleans")


class Codec:
    """Encodes a flat float32 tensor of n elements to a payload of a fixed
    dtype and size (so that every rank's payload has one shape), decodes
    one; `summable`: payloads add up element-wise (allreduce), else they
    are allgathered and each decoded."""
    name, summable, feedback = "none", True, False

    def payload_bytes(self, n):
        return 4 * n

    def encode(self, flat):
        return flat

    def decode(self, payload, n):
        return payload


class FP16(Codec):
    name = "fp16"

    def payload_bytes(self, n):
        return 2 * n

    def encode(self, flat):
        return flat.to(torch.float16)

    def decode(self, payload, n):
        return payload.to(torch.float32)


class TopK(Codec):
    """[k values (float32) | k indices (int32 bits)] as one float32 array."""
    name, summable, feedback = "topk", False, True

    def __init__(self, ratio=0.01):
        if not 0 < ratio <= 1:
            raise ValueError(f"topk ratio must be in (0, 1], got {ratio}")
        self.ratio = ratio

    def k(self, n):
        return max(1, int(n * self.ratio))

    def payload_bytes(self, n):
        return 8 * self.k(n)

    def encode(self, flat):
        k = self.k(flat.numel())
        _, idx = torch.topk(flat.abs(), k, sorted=False)
        return torch.cat([flat[idx], idx.to(torch.int32).view(torch.float32)])

    def decode(self, payload, n):
        k = payload.numel() // 2
        out = torch.zeros(n, dtype=torch.float32)
        out.index_add_(0, payload[k:].view(torch.int32).long(), payload[:k])
        return out


class OneBit(Codec):
    """[the scale as 4 bytes | the signs, 8 to a byte] as one uint8 array."""
    name, summable, feedback = "onebit", False, True

    def payload_bytes(self, n):
        return 4 + (n + 7) // 8

    def encode(self, flat):
        scale = flat.abs().mean().reshape(1)
        bits = np.packbits((flat >= 0).numpy())
        return torch.cat([scale.view(torch.uint8), torch.from_numpy(bits)])

    def decode(self, payload, n):
        scale = payload[:4].view(torch.float32)
        signs = torch.from_numpy(np.unpackbits(payload[4:].numpy(), count=n).astype(np.float32))
        return (2.0 * signs - 1.0) * scale


def make_codec(name, topk_ratio=0.01):
    check_codec(name)
    return {"none": Codec, "fp16": FP16, "onebit": OneBit}.get(name, lambda: TopK(topk_ratio))()


class ErrorFeedback:
    """Per tensor, what compression dropped so far: compress(g + residual),
    then residual = (g + residual) - decode(that). Nothing is lost, only
    late (Seide et al. 2014; Karimireddy et al. 2019)."""

    def __init__(self):
        self.residual = {}

    def compensate(self, key, flat):
        r = self.residual.get(key)
        return flat if r is None else flat + r

    def update(self, key, sent, decoded):
        self.residual[key] = sent - decoded


def encode(codec, flat, feedback=None, key=None):
    """(payload, what it decodes to, or None where not decoded) of a flat
    float32 tensor, through `feedback` (under `key`) when the codec keeps
    one: what DistributedOptimizer sends."""
    if feedback is None or not codec.feedback:
        return codec.encode(flat), None
    flat = feedback.compensate(key, flat)
    payload = codec.encode(flat)
    decoded = codec.decode(payload, flat.numel())
    feedback.update(key, flat, decoded)
    return payload, decoded


def compress(tensor, codec, feedback=None, key=None):
    """(payload, what it decodes to) for one tensor, through error feedback
    when given one: the standalone form of what DistributedOptimizer does."""
    check_float(tensor, key or "tensor")
    c = make_codec(codec) if isinstance(codec, str) else codec
    flat = tensor.detach().reshape(-1).to(torch.float32)
    payload, decoded = encode(c, flat, feedback, key)
    if decoded is None:
        decoded = c.decode(payload, flat.numel())
    return payload, decoded.reshape(tensor.shape)


class CostModel:
    """Predicts, for a tensor of n float32 elements on a group of `world`
    ranks, the time to send it raw (ring allreduce: 2 (W - 1) / W of it per
    rank over a link of `bandwidth` bytes/s, plus `latency` per call) and
    compressed (encode, the collective on the payload: an allreduce when
    payloads add up, else an allgather of W - 1 payloads per rank with
    `gather_latency`, never taken below `latency`, then the decodes), from
    measured figures. `codec_speed`:
    codec -> (encode s per call, encode s per element, decode s per call,
    decode s per element). `choose` says whether compressing pays."""

    def __init__(self, world, latency, bandwidth, codec_speed, gather_latency=None, margin=0.1):
        self.world, self.latency, self.bandwidth, self.margin = world, latency, bandwidth, margin
        self.gather_latency = latency if gather_latency is None else gather_latency
        self.codec_speed = codec_speed

    def raw_s(self, n):
        w = self.world
        return self.latency + 2 * (w - 1) / w * 4 * n / self.bandwidth

    def compressed_s(self, codec, n):
        w = self.world
        enc0, enc, dec0, dec = self.codec_speed[codec.name]
        if codec.summable:
            moved, latency, decodes = 2 * (w - 1) / w * codec.payload_bytes(n), self.latency, 1
        else:
            # a codec saves bytes, never a round trip: the lower of two noisy
            # latency figures must not win a latency-bound tensor for it
            moved, latency, decodes = (w - 1) * codec.payload_bytes(n), max(self.latency, self.gather_latency), w
        return enc0 + enc * n + latency + moved / self.bandwidth + decodes * (dec0 + dec * n)

    def choose(self, codec, n):
        """(use the codec?, predicted raw s, predicted compressed s): used
        where predicted faster by `margin` (10%) at least. A lossy codec
        costs accuracy, which the model does not price, and the figures are
        measured on a busy machine: a near tie goes to sending raw."""
        raw, comp = self.raw_s(n), self.compressed_s(codec, n)
        return comp < (1.0 - self.margin) * raw, raw, comp


def measure_codec(codec, reps=3):
    """(encode s per call, per element, decode s per call, per element) of
    `codec` on this machine: the best of `reps` at 1 Ki and at 1 Mi elements."""
    def best(n):
        flat = torch.randn(n)
        e = d = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            payload = codec.encode(flat)
            t1 = time.perf_counter()
            codec.decode(payload, n)
            t2 = time.perf_counter()
            e, d = min(e, t1 - t0), min(d, t2 - t1)
        return e, d

    small, big = 1 << 10, 1 << 20
    (e0, d0), (e1, d1) = best(small), best(big)
    enc = max(0.0, (e1 - e0) / (big - small))
    dec = max(0.0, (d1 - d0) / (big - small))
    return max(0.0, e0 - enc * small), enc, max(0.0, d0 - dec * small), dec
