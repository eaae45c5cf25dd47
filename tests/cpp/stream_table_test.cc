#include "scheduler/stream_table.h"

#include <gtest/gtest.h>

#include "core/ids.h"
#include "table_owner.h"

namespace phalanx::scheduler {

// A generator's items held for its caller, its reads, drops and credit, on a
// real object table (no raylet around it).
class StreamTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto region = objectstore::ShmRegion::Create(1 << 20, "test-streams");
    ASSERT_TRUE(region.ok());
    store_ = std::make_unique<objectstore::ObjectStore>(std::move(region).value());
    objects_ = std::make_unique<objectstore::ObjectTable>(store_.get(), &owner_);
    streams_ = std::make_unique<StreamTable>(io_, objects_.get());
    objects_->AddRef(Return());  // the caller's hold on the return
  }
  std::string Return() const { return MakeObjectId(task_, 1); }
  // Item k arrives as the raylet stores it: the table first, then the value.
  void Arrive(uint64_t k) {
    streams_->OnItem(task_, k);
    objects_->PutInline(StreamItemId(task_, k), "item" + std::to_string(k), {});
  }
  bool Freed(uint64_t k) const {
    return std::find(freed_.begin(), freed_.end(), StreamItemId(task_, k)) != freed_.end();
  }
  rpc::StreamNextReply Next(uint64_t consumed, int64_t timeout_ms = 0, const std::string& by = "caller") {
    rpc::StreamNextReply out;
    bool got = false;
    streams_->Next(task_, by, consumed, timeout_ms, [&](const rpc::StreamNextReply& r) {
      out = r;
      got = true;
    });
    while (!got) io_.run_one();
    io_.restart();
    return out;
  }

  boost::asio::io_context io_;
  objectstore::RecordingOwner owner_;  // what the table freed
  std::vector<std::string>& freed_ = owner_.freed;
  std::unique_ptr<objectstore::ObjectStore> store_;
  std::unique_ptr<objectstore::ObjectTable> objects_;
  std::unique_ptr<StreamTable> streams_;
  const std::string task_ = MakeTaskId(std::string(8, 'c'), 42);
};

TEST_F(StreamTableTest, ItemsAreHeldUntilTheCallerHasReadThem) {
  streams_->Open(task_, "caller", false);
  Arrive(0);
  Arrive(1);
  EXPECT_EQ(streams_->held(), 2u);
  EXPECT_FALSE(Freed(0));
  auto r = Next(0);
  EXPECT_EQ(r.available(), 2u);
  EXPECT_FALSE(r.ended());
  // Read item 0 (the caller holds it with its own ref now) and let it go.
  objects_->AddRef(StreamItemId(task_, 0));
  Next(1);
  EXPECT_EQ(streams_->held(), 1u);
  objects_->RemoveRef(StreamItemId(task_, 0));
  EXPECT_TRUE(Freed(0));
  EXPECT_FALSE(Freed(1));
}

TEST_F(StreamTableTest, AReadWaitsForTheNextItemOrTheEnd) {
  streams_->Open(task_, "caller", false);
  rpc::StreamNextReply out;
  bool got = false;
  streams_->Next(task_, "caller", 0, -1, [&](const rpc::StreamNextReply& r) {
    out = r;
    got = true;
  });
  io_.poll();
  EXPECT_FALSE(got);
  Arrive(0);
  EXPECT_TRUE(got);
  EXPECT_EQ(out.available(), 1u);
  // The end: the producer made 1; once the return is here the stream is over.
  streams_->OnEnd(task_, 1);
  auto r = Next(1);
  EXPECT_TRUE(r.ended());
  objects_->PutInline(Return(), "1", {});
  EXPECT_EQ(streams_->size(), 0u);
}

TEST_F(StreamTableTest, ItemsAndTheLastWordMayComeAfterTheReturn) {
  // A spilled task's result and its items travel by different connections.
  streams_->Open(task_, "caller", false);
  objects_->PutInline(Return(), "2", {});
  EXPECT_EQ(streams_->size(), 1u);  // not over: its items are on their way
  EXPECT_FALSE(Next(0).ended());
  Arrive(0);
  Arrive(1);
  streams_->OnEnd(task_, 2);
  auto r = Next(0);
  EXPECT_EQ(r.available(), 2u);
  EXPECT_TRUE(r.ended());
  Next(2);  // read both
  EXPECT_EQ(streams_->size(), 0u);
  EXPECT_EQ(streams_->held(), 0u);
}

TEST_F(StreamTableTest, ALostReturnEndsTheStreamWithoutALastWord) {
  streams_->Open(task_, "caller", false);
  Arrive(0);
  objects_->MarkLost(Return(), StatusCode::kWorkerDied, "the producer died");
  auto r = Next(0);
  EXPECT_EQ(r.available(), 1u);
  EXPECT_TRUE(r.ended());
  Next(1);
  EXPECT_EQ(streams_->size(), 0u);
}

TEST_F(StreamTableTest, DroppingFreesUnreadItemsAndStopsTheProducer) {
  streams_->Open(task_, "caller", false);
  Arrive(0);
  Arrive(1);
  rpc::StreamCreditReply credit;
  bool answered = false;
  streams_->Credit(task_, 2, 5000, [&](const rpc::StreamCreditReply& r) {
    credit = r;
    answered = true;
  });
  EXPECT_FALSE(answered);
  streams_->Drop(task_, "someone else");  // only its caller may
  EXPECT_FALSE(answered);
  streams_->Drop(task_, "caller");
  EXPECT_TRUE(answered);
  EXPECT_TRUE(credit.dropped());
  EXPECT_TRUE(Freed(0));
  EXPECT_TRUE(Freed(1));
  Arrive(2);  // made before the producer heard: freed at once
  EXPECT_TRUE(Freed(2));
  objects_->PutInline(Return(), "3", {});
  EXPECT_EQ(streams_->size(), 0u);
  // A producer asking after the stream is gone is told to stop.
  answered = false;
  streams_->Credit(task_, 3, 5000, [&](const rpc::StreamCreditReply& r) {
    credit = r;
    answered = true;
  });
  EXPECT_TRUE(answered);
  EXPECT_TRUE(credit.dropped());
}

TEST_F(StreamTableTest, CreditIsGivenAsTheCallerReads) {
  streams_->Open(task_, "caller", false);
  for (uint64_t k = 0; k < 3; ++k) Arrive(k);
  uint64_t consumed = 0;
  bool answered = false;
  streams_->Credit(task_, 2, 5000, [&](const rpc::StreamCreditReply& r) {
    consumed = r.consumed();
    answered = true;
  });
  Next(1);
  EXPECT_FALSE(answered);
  Next(2, 0, "someone else");  // a read by another client acknowledges nothing
  EXPECT_FALSE(answered);
  Next(2);
  EXPECT_TRUE(answered);
  EXPECT_EQ(consumed, 2u);
}

TEST_F(StreamTableTest, TheCallersExitDropsItsStreams) {
  streams_->Open(task_, "caller", false);
  Arrive(0);
  streams_->DropAllOf("caller");
  EXPECT_TRUE(Freed(0));
  EXPECT_EQ(streams_->held(), 0u);
}

TEST_F(StreamTableTest, ADynamicReturnHoldsItsItems) {
  streams_->Open(task_, "caller", true);
  Arrive(0);
  Arrive(1);
  streams_->OnEnd(task_, 2);
  // The return's value holds both refs; from then on the stream lets go.
  objects_->PutInline(Return(), "refs", {StreamItemId(task_, 0), StreamItemId(task_, 1)});
  EXPECT_EQ(streams_->size(), 0u);
  EXPECT_FALSE(Freed(0));
  objects_->RemoveRef(Return());
  EXPECT_TRUE(Freed(0));
  EXPECT_TRUE(Freed(1));
}

TEST_F(StreamTableTest, ARetriedProducersItemsAreNotCountedTwice) {
  streams_->Open(task_, "caller", false);
  Arrive(0);
  Arrive(0);
  Arrive(2);  // past a gap
  EXPECT_EQ(Next(0).available(), 1u);
  Arrive(1);
  EXPECT_EQ(Next(0).available(), 3u);
  EXPECT_EQ(streams_->held(), 3u);
}

}  // namespace phalanx::scheduler
