// Element-wise reduce kernels on the GPU: the same ops, dtypes and rounding
// as the CPU kernels (collectives/reduce_ops.h), so a reduce gives the same
// bytes wherever it runs. float16 and bfloat16 are combined in float and
// rounded to nearest even. Built only with CUDA (PHALANX_HAVE_CUDA).
#pragma once

#include <cstddef>

#include "collectives/reduce_ops.h"
#include "core/status.h"

namespace phalanx::collectives::cuda {

// Enqueues acc[i] = op(acc[i], in[i]) for i < count on `stream` (a
// cudaStream_t; null: the default stream) and returns at once; the launch's
// error, if any, comes back. REQUIRES: both are device pointers on the
// current device holding `count` elements of `type`; they may not overlap
// unless equal.
Status ReduceIntoDevice(ReduceOp op, DType type, void* acc, const void* in, size_t count, void* stream);

}  // namespace phalanx::collectives::cuda
