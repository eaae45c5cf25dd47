#include "collectives/cuda/reduce_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace phalanx::collectives::cuda {

namespace {

// The element ops as the CPU kernels write them (std::min/max's NaN rules:
// min(x, y) = y < x ? y : x).
struct Sum {
  template <typename T>
  __device__ T operator()(T x, T y) const { return static_cast<T>(x + y); }
};
struct Prod {
  template <typename T>
  __device__ T operator()(T x, T y) const { return static_cast<T>(x * y); }
};
struct Min {
  template <typename T>
  __device__ T operator()(T x, T y) const { return y < x ? y : x; }
};
struct Max {
  template <typename T>
  __device__ T operator()(T x, T y) const { return x < y ? y : x; }
};

// How an element is combined: in its own type, or (16-bit floats) in float.
template <typename T>
struct Arith {
  using Wide = T;
  __device__ static Wide Widen(T x) { return x; }
  __device__ static T Narrow(Wide x) { return x; }
};
template <>
struct Arith<__half> {
  using Wide = float;
  __device__ static float Widen(__half x) { return __half2float(x); }
  __device__ static __half Narrow(float x) { return __float2half_rn(x); }
};
template <>
struct Arith<__nv_bfloat16> {
  using Wide = float;
  __device__ static float Widen(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 Narrow(float x) { return __float2bfloat16_rn(x); }
};

template <typename T, typename Op>
__global__ void ReduceKernel(T* acc, const T* in, size_t n) {
  Op op;
  size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    acc[i] = Arith<T>::Narrow(op(Arith<T>::Widen(acc[i]), Arith<T>::Widen(in[i])));
  }
}

template <typename T, typename Op>
Status Launch(void* acc, const void* in, size_t n, cudaStream_t stream) {
  if (n == 0) return Status::OK();
  constexpr int kThreads = 256;
  // Enough blocks to fill the device several times over; each thread then
  // strides over the rest (memory bound either way).
  size_t blocks = std::min<size_t>((n + kThreads - 1) / kThreads, 65535);
  ReduceKernel<T, Op><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<T*>(acc),
                                                                              static_cast<const T*>(in), n);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Internal(std::string("reduce kernel launch: ") + cudaGetErrorString(e));
  return Status::OK();
}

template <typename T>
Status LaunchOp(ReduceOp op, void* acc, const void* in, size_t n, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum: return Launch<T, Sum>(acc, in, n, stream);
    case ReduceOp::kProd: return Launch<T, Prod>(acc, in, n, stream);
    case ReduceOp::kMin: return Launch<T, Min>(acc, in, n, stream);
    case ReduceOp::kMax: return Launch<T, Max>(acc, in, n, stream);
  }
  return Status::InvalidArgument("unknown reduce op");
}

}  // namespace

Status ReduceIntoDevice(ReduceOp op, DType type, void* acc, const void* in, size_t count, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DType::kFloat16: return LaunchOp<__half>(op, acc, in, count, s);
    case DType::kBFloat16: return LaunchOp<__nv_bfloat16>(op, acc, in, count, s);
    case DType::kFloat32: return LaunchOp<float>(op, acc, in, count, s);
    case DType::kFloat64: return LaunchOp<double>(op, acc, in, count, s);
    case DType::kInt8: return LaunchOp<int8_t>(op, acc, in, count, s);
    case DType::kInt16: return LaunchOp<int16_t>(op, acc, in, count, s);
    case DType::kInt32: return LaunchOp<int32_t>(op, acc, in, count, s);
    case DType::kInt64: return LaunchOp<int64_t>(op, acc, in, count, s);
    case DType::kUInt8: return LaunchOp<uint8_t>(op, acc, in, count, s);
    case DType::kUInt16: return LaunchOp<uint16_t>(op, acc, in, count, s);
    case DType::kUInt32: return LaunchOp<uint32_t>(op, acc, in, count, s);
    case DType::kUInt64: return LaunchOp<uint64_t>(op, acc, in, count, s);
  }
  return Status::InvalidArgument("unknown dtype");
}

}  // namespace phalanx::collectives::cuda
