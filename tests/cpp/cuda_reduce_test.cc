// The GPU reduce kernels (collectives/cuda/reduce_kernels.h) give the same
// bytes as the CPU kernels, for every op and dtype, on sizes that are not
// multiples of a block. Skips, saying why, where phalanx was built without
// CUDA or no GPU is here.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/reduce_ops.h"

#ifdef PHALANX_HAVE_CUDA
#include "collectives/cuda/device.h"
#include "collectives/cuda/reduce_kernels.h"
#endif

namespace phalanx::collectives {
namespace {

#ifdef PHALANX_HAVE_CUDA

// `n` random elements of `type` as bytes: floats hold finite values of
// either sign (16-bit ones made from float32, so no NaN), integers any bits.
std::vector<uint8_t> RandomElements(DType type, size_t n, std::mt19937& rng) {
  std::vector<uint8_t> out(n * DTypeSize(type));
  std::uniform_real_distribution<float> real(-8.0f, 8.0f);
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = out.data() + i * DTypeSize(type);
    float f = real(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    switch (type) {
      case DType::kFloat32: std::memcpy(p, &f, 4); break;
      case DType::kFloat64: { double d = f; std::memcpy(p, &d, 8); break; }
      case DType::kBFloat16: { uint16_t h = static_cast<uint16_t>(bits >> 16); std::memcpy(p, &h, 2); break; }
      case DType::kFloat16: {  // |f| < 8: a normal half from float's sign, exponent and top mantissa bits
        int32_t e = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
        uint16_t h = static_cast<uint16_t>(((bits >> 16) & 0x8000) | (e > 0 ? (e << 10) | ((bits >> 13) & 0x3ff) : 0));
        std::memcpy(p, &h, 2);
        break;
      }
      default:
        for (size_t b = 0; b < DTypeSize(type); ++b) p[b] = static_cast<uint8_t>(rng());
    }
  }
  return out;
}

TEST(CudaReduceTest, EveryOpAndDtypeGivesTheCpuKernelsBytes) {
  auto devices = cuda::DeviceCount();
  if (!devices.ok()) GTEST_SKIP() << devices.status().message();
  std::mt19937 rng(7);
  const DType types[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64, DType::kInt8,
                         DType::kInt16,   DType::kInt32,    DType::kInt64,   DType::kUInt8,   DType::kUInt16,
                         DType::kUInt32,  DType::kUInt64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};
  for (size_t n : {size_t{1}, size_t{1000}, size_t{(1 << 20) + 3}}) {
    for (DType type : types) {
      for (ReduceOp op : ops) {
        auto a = RandomElements(type, n, rng), b = RandomElements(type, n, rng);
        auto da = cuda::DeviceBuffer::Allocate(a.size());
        auto db = cuda::DeviceBuffer::Allocate(b.size());
        ASSERT_TRUE(da.ok() && db.ok()) << da.status().message();
        ASSERT_TRUE(da.value()->CopyFromHost(a.data(), a.size()).ok());
        ASSERT_TRUE(db.value()->CopyFromHost(b.data(), b.size()).ok());
        ASSERT_TRUE(cuda::ReduceIntoDevice(op, type, da.value()->data(), db.value()->data(), n, nullptr).ok());
        ASSERT_TRUE(cuda::Synchronize(nullptr).ok());
        std::vector<uint8_t> got(a.size());
        ASSERT_TRUE(da.value()->CopyToHost(got.data(), got.size()).ok());
        ASSERT_TRUE(ReduceInto(op, type, a.data(), b.data(), n).ok());
        ASSERT_EQ(got, a) << DTypeName(type) << " " << ReduceOpName(op) << " over " << n << " elements";
      }
    }
  }
}

TEST(CudaReduceTest, ZeroElementsLaunchNothing) {
  auto devices = cuda::DeviceCount();
  if (!devices.ok()) GTEST_SKIP() << devices.status().message();
  EXPECT_TRUE(cuda::ReduceIntoDevice(ReduceOp::kSum, DType::kFloat32, nullptr, nullptr, 0, nullptr).ok());
}

#else

TEST(CudaReduceTest, EveryOpAndDtypeGivesTheCpuKernelsBytes) {
  GTEST_SKIP() << "phalanx was built without CUDA (no nvcc at configure time)";
}

#endif

}  // namespace
}  // namespace phalanx::collectives
