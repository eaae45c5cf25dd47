#include "collectives/reduce_ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/reduce_manager.h"

namespace phalanx::collectives {

TEST(ReduceOpsTest, SumProdMinMaxOnFloat32) {
  std::vector<float> a{1, 5, -2, 0}, b{2, 3, 4, 0};
  auto run = [&](ReduceOp op) {
    std::vector<float> acc = a;
    EXPECT_TRUE(ReduceInto(op, DType::kFloat32, acc.data(), b.data(), acc.size()).ok());
    return acc;
  };
  EXPECT_EQ(run(ReduceOp::kSum), (std::vector<float>{3, 8, 2, 0}));
  EXPECT_EQ(run(ReduceOp::kProd), (std::vector<float>{2, 15, -8, 0}));
  EXPECT_EQ(run(ReduceOp::kMin), (std::vector<float>{1, 3, -2, 0}));
  EXPECT_EQ(run(ReduceOp::kMax), (std::vector<float>{2, 5, 4, 0}));
}

TEST(ReduceOpsTest, IntegerTypesWrapLikeNumpy) {
  std::vector<uint8_t> a{250, 1}, b{10, 2};
  ASSERT_TRUE(ReduceInto(ReduceOp::kSum, DType::kUInt8, a.data(), b.data(), 2).ok());
  EXPECT_EQ(a[0], 4);
  EXPECT_EQ(a[1], 3);
  std::vector<int64_t> c{-5, 7}, d{3, -9};
  ASSERT_TRUE(ReduceInto(ReduceOp::kMin, DType::kInt64, c.data(), d.data(), 2).ok());
  EXPECT_EQ(c, (std::vector<int64_t>{-5, -9}));
}

TEST(ReduceOpsTest, Float16SumIsExactForSmallIntegers) {
  // 1.0 = 0x3c00, 2.0 = 0x4000, 3.0 = 0x4200 in IEEE half.
  std::vector<uint16_t> a{0x3c00, 0x4000}, b{0x4000, 0x3c00};
  ASSERT_TRUE(ReduceInto(ReduceOp::kSum, DType::kFloat16, a.data(), b.data(), 2).ok());
  EXPECT_EQ(a[0], 0x4200);
  EXPECT_EQ(a[1], 0x4200);
}

TEST(ReduceOpsTest, Float16RoundsToNearestEvenLikeNumpy) {
  // 1 + 2^-11 lies halfway between 1 (0x3c00) and the next half, 0x3c01: the
  // even one wins; 0x3c01 + 2^-11 lies halfway between 0x3c01 and 0x3c02.
  std::vector<uint16_t> a{0x3c00, 0x3c01, 0x0001}, b{0x1000, 0x1000, 0x0001};  // 2^-11; 2^-24 (subnormal)
  ASSERT_TRUE(ReduceInto(ReduceOp::kSum, DType::kFloat16, a.data(), b.data(), 3).ok());
  EXPECT_EQ(a[0], 0x3c00);
  EXPECT_EQ(a[1], 0x3c02);
  EXPECT_EQ(a[2], 0x0002);  // subnormals add exactly
  std::vector<uint16_t> top{0x7bff}, more{0x7bff};  // 65504 + 65504 overflows to infinity
  ASSERT_TRUE(ReduceInto(ReduceOp::kSum, DType::kFloat16, top.data(), more.data(), 1).ok());
  EXPECT_EQ(top[0], 0x7c00);
}

TEST(ReduceOpsTest, TheFastPathsGiveThePortableLoopsBytes) {
  // Every finite float16 against shifted copies of itself (subnormals,
  // overflow to infinity and ties included), over a length that is not a
  // multiple of a vector; every op. (NaN payloads may differ: none here.)
  std::vector<uint16_t> all;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) != 0x7c00) all.push_back(static_cast<uint16_t>(h));
  }
  for (size_t shift : {size_t{1}, size_t{977}, size_t{31000}}) {
    std::vector<uint16_t> other(all.size());
    for (size_t i = 0; i < all.size(); ++i) other[i] = all[(i + shift) % all.size()];
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
      for (DType t : {DType::kFloat16, DType::kBFloat16}) {
        std::vector<uint16_t> fast = all, portable = all;
        ASSERT_TRUE(ReduceInto(op, t, fast.data(), other.data(), all.size() - 3).ok());
        ASSERT_TRUE(ReduceIntoPortable(op, t, portable.data(), other.data(), all.size() - 3).ok());
        ASSERT_EQ(fast, portable) << DTypeName(t) << " " << ReduceOpName(op) << " shift " << shift;
      }
    }
  }
}

TEST(ReduceOpsTest, BFloat16RoundsToNearestEvenLikeTorch) {
  // bfloat16 is float32's top half: 1.0 = 0x3f80, 2.0 = 0x4000, 3.0 = 0x4040.
  std::vector<uint16_t> a{0x3f80, 0x4000, 0x3f80, 0x7fc0}, b{0x4000, 0x4000, 0x3b80, 0x3f80};
  ASSERT_TRUE(ReduceInto(ReduceOp::kSum, DType::kBFloat16, a.data(), b.data(), 4).ok());
  EXPECT_EQ(a[0], 0x4040);  // 3
  EXPECT_EQ(a[1], 0x4080);  // 4
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one, 1.
  EXPECT_EQ(a[2], 0x3f80);
  EXPECT_EQ(a[3] & 0x7f80, 0x7f80);  // NaN + 1 is a NaN
  EXPECT_NE(a[3] & 0x7f, 0);
  std::vector<uint16_t> lo{0xc000, 0x3f80}, hi{0x3f80, 0x4000};  // -2, 1 against 1, 2
  ASSERT_TRUE(ReduceInto(ReduceOp::kMin, DType::kBFloat16, lo.data(), hi.data(), 2).ok());
  EXPECT_EQ(lo, (std::vector<uint16_t>{0xc000, 0x3f80}));
  EXPECT_EQ(DTypeSize(ParseDType("bfloat16").value()), 2u);
  EXPECT_STREQ(DTypeName(DType::kBFloat16), "bfloat16");
  DType t;
  EXPECT_TRUE(DTypeFromCode(12, &t));  // the header's code for bfloat16
  EXPECT_EQ(t, DType::kBFloat16);
  EXPECT_FALSE(DTypeFromCode(13, &t));
}

TEST(ReduceOpsTest, ZeroElementsAndBadNames) {
  EXPECT_TRUE(ReduceInto(ReduceOp::kSum, DType::kFloat64, nullptr, nullptr, 0).ok());
  EXPECT_FALSE(ParseReduceOp("mean").ok());
  EXPECT_FALSE(ParseDType("complex64").ok());
  EXPECT_EQ(DTypeSize(ParseDType("int16").value()), 2u);
}

// A value laid out as python/bindings/serialization.cc writes it: header,
// one buffer length, `meta_len` bytes of pickle, the array 64-byte aligned.
std::vector<uint8_t> Value(uint32_t kind, uint32_t nbuf, uint32_t dtype, uint64_t meta_len, uint64_t data_len) {
  uint64_t data_off = (24 + 8 * nbuf + meta_len + 63) & ~63ull;
  std::vector<uint8_t> v(data_off + data_len, 0);
  uint32_t head[4] = {0x31584850, kind, nbuf, dtype};
  std::memcpy(v.data(), head, 16);
  std::memcpy(v.data() + 16, &meta_len, 8);
  if (nbuf > 0) std::memcpy(v.data() + 24, &data_len, 8);
  return v;
}

TEST(ReduceOpsTest, ParseArrayFindsTheDataOrSaysWhyNot) {
  auto v = Value(0, 1, 2, 100, 40);  // float32, 10 elements
  auto l = ParseArray(v.data(), v.size());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l.value().dtype, DType::kFloat32);
  EXPECT_EQ(l.value().data_offset, 192u);
  EXPECT_EQ(l.value().data_bytes, 40u);
  EXPECT_EQ(ParseArray(v.data(), v.size() - 1).status().code(), StatusCode::kInvalidArgument);  // truncated
  auto err = Value(1, 0, 0, 10, 0);
  EXPECT_EQ(ParseArray(err.data(), err.size()).status().code(), StatusCode::kTaskFailed);
  auto plain = Value(0, 0, 0, 10, 0);  // a pickled Python value
  EXPECT_NE(ParseArray(plain.data(), plain.size()).status().message().find("not a C-contiguous numpy array"),
            std::string::npos);
  auto odd = Value(0, 1, 7, 10, 12);  // int64 with 12 bytes
  EXPECT_FALSE(ParseArray(odd.data(), odd.size()).ok());
  v[0] = 0;
  EXPECT_NE(ParseArray(v.data(), v.size()).status().message().find("magic"), std::string::npos);
}

}  // namespace phalanx::collectives
