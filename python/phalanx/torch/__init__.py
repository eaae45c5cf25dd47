"""Horovod-style data-parallel training with PyTorch on a phalanx static
group: DistributedOptimizer (gradients averaged in fused buckets while
backward runs, optional compression chosen per tensor by a cost model) and
broadcast_parameters. See optimizer.py and compression.py, and
examples/train/horovod_style.py. Needs torch (pip install phalanx[torch])."""
try:
    import torch  # noqa: F401  (the top-level torch, not this package)
except ImportError as e:  # pragma: no cover - torch is an optional extra
    raise ImportError("phalanx.torch needs PyTorch: pip install torch (or phalanx[torch])") from e

from phalanx.torch.compression import CODECS, CostModel, ErrorFeedback, compress, make_codec
from phalanx.torch.optimizer import DEFAULT_FUSION, DistributedOptimizer, broadcast_parameters

__all__ = ["DistributedOptimizer", "broadcast_parameters", "CODECS", "CostModel", "ErrorFeedback", "compress",
           "make_codec", "DEFAULT_FUSION"]
