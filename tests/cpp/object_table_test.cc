#include "objectstore/object_table.h"

#include <gtest/gtest.h>

#include <tuple>

#include "table_owner.h"

namespace phalanx::objectstore {

class ObjectTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto region = ShmRegion::Create(1 << 20, "test-table");
    ASSERT_TRUE(region.ok());
    store_ = std::make_unique<ObjectStore>(std::move(region).value());
    table_ = std::make_unique<ObjectTable>(store_.get(), &owner_);
  }
  static std::string Id(char c) { return std::string(20, c); }
  RecordingOwner owner_;  // what the table asks of the nodes that lent it objects, and what it freed
  std::vector<std::tuple<std::string, std::string, uint32_t>>& dropped = owner_.dropped;
  std::vector<std::pair<std::string, std::string>>& demanded = owner_.demanded;
  std::vector<std::string>& freed_ = owner_.freed;
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<ObjectTable> table_;
};

TEST_F(ObjectTableTest, WaitersRunWhenValueArrives) {
  int ran = 0;
  table_->AddRef(Id('a'));
  table_->OnReady(Id('a'), [&] { ++ran; });
  EXPECT_EQ(ran, 0);
  table_->PutInline(Id('a'), "v", {});
  EXPECT_EQ(ran, 1);
  table_->OnReady(Id('a'), [&] { ++ran; });  // already ready: runs now
  EXPECT_EQ(ran, 2);
  rpc::ObjectValue v;
  table_->Describe(Id('a'), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_INLINE);
  EXPECT_EQ(v.data(), "v");
}

TEST_F(ObjectTableTest, LastReferenceFreesValueAndContainedObjects) {
  table_->AddRef(Id('i'));
  table_->PutInline(Id('i'), "inner", {});
  table_->AddRef(Id('o'));
  table_->PutInline(Id('o'), "outer", {Id('i')});
  table_->RemoveRef(Id('i'));  // still held by the outer value
  EXPECT_TRUE(freed_.empty());
  table_->RemoveRef(Id('o'));
  ASSERT_EQ(freed_.size(), 2u);
  EXPECT_EQ(freed_[0], Id('o'));
  EXPECT_EQ(freed_[1], Id('i'));
  rpc::ObjectValue v;
  table_->Describe(Id('i'), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST) << "a late reader learns the object was freed";
  EXPECT_NE(v.error().find("freed"), std::string::npos);
}

TEST_F(ObjectTableTest, StoreObjectFreedAfterLastPinAndRef) {
  table_->AddRef(Id('s'));
  ASSERT_TRUE(table_->CreateInStore(Id('s'), 4096, {}).ok());
  ASSERT_TRUE(table_->SealInStore(Id('s')).ok());
  rpc::ObjectValue v;
  table_->Describe(Id('s'), &v, /*pin=*/true);
  EXPECT_EQ(v.state(), rpc::OBJ_IN_STORE);
  table_->RemoveRef(Id('s'));
  EXPECT_NE(store_->Find(Id('s')), nullptr) << "still mapped by a reader";
  table_->ReleasePin(Id('s'));
  EXPECT_EQ(store_->Find(Id('s')), nullptr);
  EXPECT_EQ(store_->Stats().used, 0u);
}

TEST_F(ObjectTableTest, UnheldResultIsFreedWhenItArrives) {
  table_->AddRef(Id('r'));
  table_->RemoveRef(Id('r'));  // the submitter dropped the ref before the task finished
  table_->PutInline(Id('r'), "late", {});
  EXPECT_EQ(table_->num_inline(), 0u);
}

TEST_F(ObjectTableTest, LostObjectCarriesCodeAndReason) {
  table_->AddRef(Id('l'));
  bool ran = false;
  table_->OnReady(Id('l'), [&] { ran = true; });
  table_->MarkLost(Id('l'), StatusCode::kWorkerDied, "worker died");
  EXPECT_TRUE(ran);
  rpc::ObjectValue v;
  table_->Describe(Id('l'), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_EQ(v.error_code(), static_cast<int>(StatusCode::kWorkerDied));
}

// Refs that arrive from another node inside a value or task (borrowed): the
// lender is counted once per arrival and told the count when they go.
TEST_F(ObjectTableTest, BorrowedRefsAreRemoteAtTheLenderAndReleasedByCount) {
  EXPECT_TRUE(table_->AddBorrowed({Id('x')}, "B").empty());
  EXPECT_TRUE(table_->AddBorrowed({Id('x')}, "B").empty()) << "a second value from B with it: two holds there";
  EXPECT_EQ(table_->AddBorrowed({Id('x')}, "C"), std::vector<std::string>{Id('x')})
      << "already read from B: C's hold is not needed";
  EXPECT_EQ(table_->RemoteNode(Id('x')), "B");
  EXPECT_TRUE(demanded.empty()) << "nothing read until someone waits for it";
  table_->RemoveRef(Id('x'));
  table_->RemoveRef(Id('x'));
  EXPECT_TRUE(dropped.empty());
  table_->RemoveRef(Id('x'));
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], std::make_tuple(Id('x'), std::string("B"), 2u));
  // Freed here, lent again: a new borrow.
  EXPECT_TRUE(table_->AddBorrowed({Id('x')}, "B").empty());
  table_->RemoveRef(Id('x'));
  EXPECT_EQ(dropped.size(), 2u);
}

TEST_F(ObjectTableTest, ABorrowOfWhatIsHereIsReleasedAtOnceAndACopyHereEndsABorrow) {
  table_->AddRef(Id('h'));
  table_->PutInline(Id('h'), "made here", {});
  EXPECT_EQ(table_->AddBorrowed({Id('h')}, "B"), std::vector<std::string>{Id('h')});
  table_->AddRef(Id('p'));  // a result of a task running here
  EXPECT_EQ(table_->AddBorrowed({Id('p')}, "B"), std::vector<std::string>{Id('p')});
  // A borrowed object that someone waits for is read from its lender; once
  // copied here, the lender lets go.
  EXPECT_TRUE(table_->AddBorrowed({Id('r')}, "B").empty());
  bool ready = false;
  table_->OnReady(Id('r'), [&] { ready = true; });
  ASSERT_EQ(demanded.size(), 1u);
  EXPECT_EQ(demanded[0], std::make_pair(Id('r'), std::string("B")));
  table_->PutInline(Id('r'), "copied", {});
  EXPECT_TRUE(ready);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], std::make_tuple(Id('r'), std::string("B"), 1u));
  EXPECT_EQ(table_->AddBorrowed({Id('r')}, "B"), std::vector<std::string>{Id('r')});
}

}  // namespace phalanx::objectstore
