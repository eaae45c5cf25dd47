#include "objectstore/allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace phalanx::objectstore {

TEST(OffsetAllocatorTest, AllocatesAlignedNonOverlappingBlocks) {
  OffsetAllocator a(1 << 20, 64);
  auto x = a.Allocate(100), y = a.Allocate(1), z = a.Allocate(0);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x % 64, 0u);
  EXPECT_EQ(*y % 64, 0u);
  EXPECT_GE(*y, *x + 100);
  EXPECT_NE(*z, *y);
  EXPECT_EQ(a.used(), 128u + 64u + 64u);
}

TEST(OffsetAllocatorTest, FailsWhenNothingFitsAndMergesFreedNeighbours) {
  OffsetAllocator a(4096, 64);
  auto x = a.Allocate(1024), y = a.Allocate(1024), z = a.Allocate(2048);
  ASSERT_TRUE(x && y && z);
  EXPECT_FALSE(a.Allocate(1));
  a.Free(*x);
  a.Free(*z);
  EXPECT_FALSE(a.Allocate(2048 + 1024));  // fragmented: 1024 + 2048 not adjacent
  a.Free(*y);
  EXPECT_EQ(a.largest_free(), 4096u);  // all three merged back
  EXPECT_TRUE(a.Allocate(4096));
}

TEST(OffsetAllocatorTest, RandomAllocFreeKeepsAccountingExact) {
  OffsetAllocator a(1 << 24, 64);
  std::mt19937 rng(42);
  std::vector<uint64_t> live;
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      if (auto off = a.Allocate(rng() % 5000)) live.push_back(*off);
    } else {
      size_t k = rng() % live.size();
      a.Free(live[k]);
      live.erase(live.begin() + k);
    }
  }
  for (auto off : live) a.Free(off);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.largest_free(), 1u << 24);
  EXPECT_EQ(a.num_allocations(), 0u);
}

}  // namespace phalanx::objectstore
