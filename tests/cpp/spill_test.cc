// Spilling: SpillFiles (bytes to disk and back, limits) and the ObjectTable's
// use of it (who is spilled, in which order, how values come back).
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <thread>

#include <boost/asio/io_context.hpp>

#include "objectstore/object_table.h"
#include "objectstore/spill_files.h"
#include "table_owner.h"

namespace phalanx::objectstore {
namespace {

constexpr uint64_t kKib = 1024;

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("phalanx-spill-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST(SpillFilesTest, BytesGoToDiskAndComeBackWhole) {
  boost::asio::io_context io;
  std::string dir = TempDir("whole");
  {
    SpillFiles files(io, SpillOptions{dir, 0});
    std::vector<uint8_t> value(20 << 20);  // more than one 8 MiB step
    std::iota(value.begin(), value.end(), 0);
    ASSERT_TRUE(files.Spill("a", value.data(), value.size()).ok());
    EXPECT_TRUE(files.Has("a"));
    EXPECT_EQ(files.SizeOf("a"), value.size());
    EXPECT_EQ(std::filesystem::file_size(dir + "/61"), value.size());  // named by the id in hex

    std::vector<uint8_t> now(value.size());
    ASSERT_TRUE(files.RestoreNow("a", now.data()).ok());
    EXPECT_EQ(now, value);

    std::vector<uint8_t> later(value.size());
    Status got = Status::Internal("not run");
    files.Restore("a", later.data(), nullptr, [&](Status st) { got = st; });
    for (int i = 0; i < 1000 && got.code() == StatusCode::kInternal; ++i) {  // the I/O thread posts its end here
      io.restart();
      if (io.run_for(std::chrono::milliseconds(5)) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(got.ok()) << got.ToString();
    EXPECT_EQ(later, value);

    auto s = files.Stats();
    EXPECT_EQ(s.objects, 1u);
    EXPECT_EQ(s.spilled_bytes, value.size());
    EXPECT_EQ(s.restored_objects, 2u);
    files.Remove("a");
    EXPECT_FALSE(std::filesystem::exists(dir + "/61"));
    EXPECT_EQ(files.Stats().bytes, 0u);
  }
  EXPECT_FALSE(std::filesystem::exists(dir));  // the folder goes with the files
}

TEST(SpillFilesTest, LimitRefusesWithFigures) {
  boost::asio::io_context io;
  std::string dir = TempDir("limit");
  SpillFiles files(io, SpillOptions{dir, 100 * kKib});
  std::vector<uint8_t> value(60 * kKib, 1);
  ASSERT_TRUE(files.Spill("a", value.data(), value.size()).ok());
  Status st = files.Spill("b", value.data(), value.size());
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(st.message().find("spill limit"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("in 1 objects"), std::string::npos) << st.message();
  EXPECT_FALSE(files.Has("b"));
  // A file about to go (a restore's own) counts as room.
  EXPECT_TRUE(files.Spill("b", value.data(), value.size(), /*credit=*/value.size()).ok());
}

TEST(SpillFilesTest, RestoreOfAMissingFileSaysSo) {
  boost::asio::io_context io;
  SpillFiles files(io, SpillOptions{TempDir("missing"), 0});
  uint8_t b = 0;
  EXPECT_EQ(files.RestoreNow("x", &b).code(), StatusCode::kNotFound);
}

class TableSpillTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kStore = 256 * kKib;
  static constexpr uint64_t kObject = 64 * kKib;  // four fill the store
  void SetUp() override {
    auto region = ShmRegion::Create(kStore, "test-spill");
    ASSERT_TRUE(region.ok());
    store_ = std::make_unique<ObjectStore>(std::move(region).value());
    table_ = std::make_unique<ObjectTable>(store_.get(), &owner_);
    files_ = std::make_unique<SpillFiles>(io_, SpillOptions{TempDir("table"), 0});
    table_->EnableSpilling(files_.get(), &io_);
  }
  static std::string Id(char c) { return std::string(20, c); }
  // A held store object of kObject bytes, each byte `c`.
  void Put(char c) {
    table_->AddRef(Id(c));
    auto off = table_->CreateInStore(Id(c), kObject, {});
    ASSERT_TRUE(off.ok()) << off.status().ToString();
    std::memset(store_->base() + off.value(), c, kObject);
    ASSERT_TRUE(table_->SealInStore(Id(c)).ok());
  }
  // The value of `c` read through a pinning Describe (then unpinned).
  void ExpectValue(char c) {
    rpc::ObjectValue v;
    table_->Describe(Id(c), &v, /*pin=*/true);
    ASSERT_EQ(v.state(), rpc::OBJ_IN_STORE) << v.error();
    ASSERT_EQ(v.size(), kObject);
    const uint8_t* p = store_->base() + v.offset();
    EXPECT_TRUE(std::all_of(p, p + kObject, [c](uint8_t b) { return b == static_cast<uint8_t>(c); }));
    table_->ReleasePin(Id(c));
  }
  void RunUntil(const std::function<bool()>& done) {
    for (int i = 0; i < 1000 && !done(); ++i) {
      io_.restart();
      if (io_.run_for(std::chrono::milliseconds(5)) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(done());
  }
  boost::asio::io_context io_;
  RecordingOwner owner_;
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<ObjectTable> table_;
  std::unique_ptr<SpillFiles> files_;
};

TEST_F(TableSpillTest, LeastRecentlyUsedIsSpilledAndStaysReady) {
  for (char c : {'a', 'b', 'c', 'd'}) Put(c);
  ExpectValue('a');  // used: 'b' is now the least recently used
  Put('e');          // no room: one goes to disk
  EXPECT_TRUE(table_->IsSpilled(Id('b')));
  EXPECT_FALSE(table_->IsSpilled(Id('a')));
  EXPECT_TRUE(table_->IsReady(Id('b')));      // ready all the same
  EXPECT_FALSE(table_->IsResident(Id('b')));  // but not in memory
  rpc::ObjectValue v;
  table_->Describe(Id('b'), &v, /*pin=*/false);  // described without reading it back
  EXPECT_EQ(v.state(), rpc::OBJ_IN_STORE);
  EXPECT_EQ(v.size(), kObject);
  EXPECT_TRUE(table_->IsSpilled(Id('b')));
  EXPECT_EQ(table_->num_spilled(), 1u);
}

TEST_F(TableSpillTest, OnResidentReadsBackOnTheIoThreadAndSpillsAnother) {
  for (char c : {'a', 'b', 'c', 'd', 'e'}) Put(c);
  ASSERT_TRUE(table_->IsSpilled(Id('a')));
  bool resident = false;
  table_->OnResident(Id('a'), [&] { resident = true; });
  EXPECT_FALSE(resident);
  RunUntil([&] { return resident; });
  EXPECT_TRUE(table_->IsResident(Id('a')));
  EXPECT_TRUE(table_->IsSpilled(Id('b')));  // made room for it
  ExpectValue('a');
  EXPECT_EQ(files_->Stats().objects, 1u);  // a's file went
}

TEST_F(TableSpillTest, PinningDescribeReadsBackAtOnce) {
  for (char c : {'a', 'b', 'c', 'd', 'e', 'f'}) Put(c);
  ASSERT_TRUE(table_->IsSpilled(Id('a')));
  ExpectValue('a');
  ExpectValue('b');
  EXPECT_TRUE(table_->IsResident(Id('a')));
}

TEST_F(TableSpillTest, MappedObjectsAreNotSpilledAndFullStoreSaysWhy) {
  for (char c : {'a', 'b', 'c', 'd'}) {
    Put(c);
    rpc::ObjectValue v;
    table_->Describe(Id(c), &v, /*pin=*/true);  // mapped by a reader
  }
  table_->AddRef(Id('e'));
  auto off = table_->CreateInStore(Id('e'), kObject, {});
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(off.status().message().find("mapped by a process"), std::string::npos) << off.status().message();
  EXPECT_EQ(table_->num_spilled(), 0u);
  EXPECT_EQ(owner_.store_full, 1);  // the owner is asked to have idle mappings let go
}

TEST_F(TableSpillTest, FreeingASpilledObjectRemovesItsFile) {
  for (char c : {'a', 'b', 'c', 'd', 'e'}) Put(c);
  ASSERT_TRUE(table_->IsSpilled(Id('a')));
  table_->RemoveRef(Id('a'));
  EXPECT_EQ(files_->Stats().objects, 0u);
  EXPECT_EQ(table_->num_spilled(), 0u);
  EXPECT_FALSE(table_->Contains(Id('a')));
  ASSERT_FALSE(owner_.freed.empty());
  EXPECT_EQ(owner_.freed.back(), Id('a'));
}

TEST_F(TableSpillTest, FreedWhileBeingReadBackWaitsForTheRead) {
  for (char c : {'a', 'b', 'c', 'd', 'e'}) Put(c);
  bool resident = false;
  table_->OnResident(Id('a'), [&] { resident = true; });
  table_->RemoveRef(Id('a'));  // its last holder goes while the read runs
  EXPECT_TRUE(table_->Contains(Id('a')));
  RunUntil([&] { return resident; });
  EXPECT_FALSE(table_->Contains(Id('a')));  // freed once read back and its waiter ran
}

}  // namespace
}  // namespace phalanx::objectstore
