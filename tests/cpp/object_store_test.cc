#include "objectstore/object_store.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace phalanx::objectstore {

std::unique_ptr<ObjectStore> MakeStore(uint64_t capacity) {
  auto region = ShmRegion::Create(capacity, "test-store");
  EXPECT_TRUE(region.ok()) << region.status().ToString();
  return std::make_unique<ObjectStore>(std::move(region).value());
}

std::string Id(char c) { return std::string(20, c); }

TEST(ObjectStoreTest, CreateSealPinDeleteLifecycle) {
  auto store = MakeStore(1 << 20);
  auto off = store->Create(Id('a'), 1000);
  ASSERT_TRUE(off.ok());
  std::memset(store->base() + off.value(), 7, 1000);
  EXPECT_FALSE(store->Pin(Id('a')).ok()) << "unsealed objects cannot be read";
  ASSERT_TRUE(store->Seal(Id('a')).ok());
  ASSERT_TRUE(store->Pin(Id('a')).ok());
  store->Delete(Id('a'));
  ASSERT_NE(store->Find(Id('a')), nullptr) << "deletion waits for the last pin";
  EXPECT_EQ(store->base()[off.value() + 999], 7);
  store->Unpin(Id('a'));
  EXPECT_EQ(store->Find(Id('a')), nullptr);
  EXPECT_EQ(store->Stats().used, 0u);
}

TEST(ObjectStoreTest, DuplicateCreateIsAlreadyExists) {
  auto store = MakeStore(1 << 20);
  ASSERT_TRUE(store->Create(Id('a'), 10).ok());
  EXPECT_EQ(store->Create(Id('a'), 10).status().code(), StatusCode::kAlreadyExists);
}

TEST(ObjectStoreTest, LeasedSpaceOutlivesAnAbortedObject) {
  auto store = MakeStore(1 << 20);
  auto off = store->Create(Id('a'), 600 << 10);
  ASSERT_TRUE(off.ok());
  std::memset(store->base() + off.value(), 5, 600 << 10);
  auto lease = store->Lease(Id('a'));  // a write from this space is in flight
  ASSERT_NE(lease, nullptr);
  store->Abort(Id('a'));
  EXPECT_EQ(store->Find(Id('a')), nullptr) << "the object goes at once";
  EXPECT_EQ(store->Create(Id('b'), 600 << 10).status().code(), StatusCode::kOutOfMemory)
      << "its space must not be handed out while leased";
  EXPECT_EQ(store->base()[off.value() + 1000], 5);
  ASSERT_TRUE(store->Create(Id('a'), 10).ok()) << "the id itself is free again";
  store->Abort(Id('a'));
  lease.reset();
  EXPECT_TRUE(store->Create(Id('b'), 600 << 10).ok()) << "the space comes back with the last lease";
  EXPECT_EQ(store->Lease(Id('z')), nullptr);
}

TEST(ObjectStoreTest, LeaseOutlivingTheStoreIsHarmless) {
  auto store = MakeStore(1 << 20);
  ASSERT_TRUE(store->Create(Id('a'), 10).ok());
  auto lease = store->Lease(Id('a'));
  store.reset();
  lease.reset();  // must not touch the destroyed store
}

TEST(ObjectStoreTest, FullStoreExplainsItself) {
  auto store = MakeStore(1 << 20);
  auto too_big = store->Create(Id('z'), 2 << 20);
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(too_big.status().message().find("larger than the whole object store"), std::string::npos);
  ASSERT_TRUE(store->Create(Id('a'), 800 << 10).ok());
  auto full = store->Create(Id('b'), 800 << 10);
  EXPECT_EQ(full.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(full.status().message().find("object store is full"), std::string::npos);
}

TEST(ObjectStoreTest, EvictsUnpinnedSecondaryCopiesLeastRecentFirst) {
  auto store = MakeStore(1 << 20);
  std::vector<std::string> evicted;
  store->SetEvictHandler([&](const std::string& id) { evicted.push_back(id); });
  for (char c : {'a', 'b', 'c'}) {
    ASSERT_TRUE(store->Create(Id(c), 300 << 10).ok());
    ASSERT_TRUE(store->Seal(Id(c)).ok());
    store->MarkEvictable(Id(c));
  }
  ASSERT_TRUE(store->Pin(Id('a')).ok());  // pinned: never evicted
  ASSERT_TRUE(store->Create(Id('d'), 300 << 10).ok());
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], Id('b'));
  EXPECT_NE(store->Find(Id('a')), nullptr);
}

}  // namespace phalanx::objectstore

namespace phalanx::objectstore {

// How many of the pages of [offset, offset + size) of `region` are resident.
static size_t ResidentPages(const ShmRegion& region, uint64_t offset, uint64_t size) {
  std::vector<unsigned char> in(size / 4096);
  if (::mincore(region.base() + offset, size, in.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(ObjectStoreTest, CreatingAnObjectMakesItsPagesResidentAheadOfTheWriter) {
#ifdef MADV_POPULATE_WRITE
  void* probe = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bool refused = ::madvise(probe, 4096, MADV_POPULATE_WRITE) != 0;
  ::munmap(probe, 4096);
  if (refused) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (before 5.14): pages come by faults";
#else
  GTEST_SKIP() << "built without MADV_POPULATE_WRITE";
#endif
  auto region = ShmRegion::Create(64 << 20, "test-populate");
  ASSERT_TRUE(region.ok());
  ObjectStore store(std::move(region).value());
  EXPECT_EQ(ResidentPages(store.region(), 0, 64 << 20), 0u);  // a fresh region: nothing touched
  ASSERT_TRUE(store.Create(Id('a'), 8 << 20).ok());
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (ResidentPages(store.region(), 0, 8 << 20) < 2048 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(ResidentPages(store.region(), 0, 8 << 20), 2048u);  // nothing written yet
  EXPECT_EQ(ResidentPages(store.region(), 16 << 20, 48 << 20), 0u);  // no further than the objects reach
}

}  // namespace phalanx::objectstore
