#include "scheduler/gpu_allocator.h"

#include <gtest/gtest.h>

namespace phalanx::scheduler {

TEST(GpuAllocatorTest, WholeGpusAreExclusive) {
  GpuAllocator g(2);
  auto a = g.Acquire(1), b = g.Acquire(1);
  ASSERT_TRUE(a && b);
  EXPECT_NE((*a)[0], (*b)[0]);
  EXPECT_FALSE(g.Acquire(1));
  EXPECT_FALSE(g.Acquire(0.1)) << "no fraction left on either";
  g.Release(*a, 1);
  EXPECT_TRUE(g.Acquire(1));
}

TEST(GpuAllocatorTest, FractionsPackOntoOneGpuBeforeTheNext) {
  GpuAllocator g(2);
  auto a = g.Acquire(0.5), b = g.Acquire(0.25), c = g.Acquire(0.25);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ((*a)[0], (*b)[0]);
  EXPECT_EQ((*b)[0], (*c)[0]);
  auto whole = g.Acquire(1);
  ASSERT_TRUE(whole);
  EXPECT_NE((*whole)[0], (*a)[0]);
  EXPECT_FALSE(g.Acquire(0.5));
  g.Release(*a, 0.5);
  EXPECT_TRUE(g.Acquire(0.5));
}

TEST(GpuAllocatorTest, MultiGpuRequestsAndZero) {
  GpuAllocator g(4);
  auto two = g.Acquire(2);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->size(), 2u);
  EXPECT_FALSE(g.Acquire(3));
  EXPECT_TRUE(g.Acquire(0)->empty());
  GpuAllocator none(0);
  EXPECT_FALSE(none.Acquire(0.5));
}

TEST(GpuAllocatorTest, DetectionWithoutADriverIsZero) {
  // On machines with no CUDA driver this is 0; with one, it matches what it reports.
  EXPECT_GE(DetectGpus(), 0);
}

}  // namespace phalanx::scheduler
