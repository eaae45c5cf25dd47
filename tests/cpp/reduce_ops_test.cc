#include "collectives/reduce_ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

TEST(ReduceOpsTest, ZeroElementsAndBadNames) {
  EXPECT_TRUE(ReduceInto(ReduceOp::kSum, DType::kFloat64, nullptr, nullptr, 0).ok());
  EXPECT_FALSE(ParseReduceOp("mean").ok());
  EXPECT_FALSE(ParseDType("complex64").ok());
  EXPECT_EQ(DTypeSize(ParseDType("int16").value()), 2u);
}

}  // namespace phalanx::collectives
