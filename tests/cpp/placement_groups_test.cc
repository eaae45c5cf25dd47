#include "scheduler/placement_groups.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>

#include "core/ids.h"

namespace phalanx::scheduler {

// The coordinator on node "A" with nodes "B" and "C" beside it; each node's
// side of the bundle messages is a PlacementGroups of its own over its own
// ledger. Messages are delivered at once unless a node is down; timers run
// when the test says so.
class PlacementGroupsTest : public ::testing::Test {
 protected:
  struct Node {
    std::unique_ptr<ResourceLedger> ledger;
    std::unique_ptr<GroupHost> host;
    std::unique_ptr<PlacementGroups> pgs;
    bool up = true;
    std::vector<std::string> returned;  // groups returned here
  };

  void SetUp() override {
    for (const char* id : {"A", "B", "C"}) AddNode(id, {{"CPU", 2}});
  }

  // Node `id`'s view of the others and of the GCS: the test's maps.
  class FakeHost : public GroupHost {
   public:
    FakeHost(PlacementGroupsTest* t, std::string id) : t_(t), id_(std::move(id)) {}
    std::vector<std::pair<std::string, ResourceSet>> Others() override {
      std::vector<std::pair<std::string, ResourceSet>> out;
      for (auto& [other, node] : t_->nodes_) {
        if (other != id_ && node.up) {
          out.emplace_back(other, t_->seen_free_.count(other) ? t_->seen_free_[other] : node.ledger->available());
        }
      }
      return out;
    }
    void SendBundleOp(const std::string& to, rpc::MessageType type, const rpc::BundleOp& op,
                      std::function<void(const Status&)> done) override {
      ++t_->sent_[type];
      Node& target = t_->nodes_[to];
      Status st = target.up ? target.pgs->OnBundleOp(type, op) : Status::Unavailable("node " + to + " is down");
      if (done) done(st);
    }
    void Publish(const rpc::PlacementGroupInfo& info) override { t_->published_.push_back(info); }
    void Forget(const std::string&) override {}
    void Fetch(const std::string& pg, std::function<void(Result<rpc::PlacementGroupInfo>)> cb) override {
      for (auto it = t_->published_.rbegin(); it != t_->published_.rend(); ++it) {
        if (it->pg_id() == pg) return cb(*it);
      }
      cb(Status::NotFound("no such group"));
    }
    void Created(const rpc::PlacementGroupInfo& info) override { t_->created_.push_back(info.pg_id()); }
    void Removed(const rpc::PlacementGroupInfo&, const std::string& why) override { t_->removed_why_ = why; }
    void ReturnedHere(const std::string& pg) override { t_->nodes_[id_].returned.push_back(pg); }
    void After(std::chrono::milliseconds, std::function<void()> fn) override { t_->timers_.push_back(std::move(fn)); }
    void Changed() override {}

   private:
    PlacementGroupsTest* t_;
    std::string id_;
  };

  void AddNode(const std::string& id, std::map<std::string, double> total) {
    Node& n = nodes_[id];
    n.ledger = std::make_unique<ResourceLedger>(ResourceSet(std::move(total)));
    n.host = std::make_unique<FakeHost>(this, id);
    n.pgs = std::make_unique<PlacementGroups>(id, n.ledger.get(), n.host.get());
  }

  PlacementGroups& A() { return *nodes_["A"].pgs; }
  void RunTimers() {
    auto due = std::move(timers_);
    timers_.clear();
    for (auto& fn : due) fn();
  }

  rpc::PlacementGroupInfo Group(rpc::PlacementStrategy s, std::vector<std::map<std::string, double>> bundles) {
    rpc::PlacementGroupInfo info;
    info.set_pg_id(std::string(kTaskIdSize - 1, 'p') + static_cast<char>('0' + next_++));
    info.set_strategy(s);
    for (auto& b : bundles) {
      auto* out = info.add_bundles();
      for (auto& [k, v] : b) (*out->mutable_resources())[k] = v;
    }
    return info;
  }
  const rpc::PlacementGroupInfo& Last(const std::string& pg) {
    for (auto it = published_.rbegin(); it != published_.rend(); ++it) {
      if (it->pg_id() == pg) return *it;
    }
    static rpc::PlacementGroupInfo none;
    return none;
  }
  double Free(const std::string& node) { return nodes_[node].ledger->available().Get("CPU"); }

  std::map<std::string, Node> nodes_;
  std::map<std::string, ResourceSet> seen_free_;  // what "A" believes others have free (stale views)
  std::map<int, int> sent_;
  std::vector<rpc::PlacementGroupInfo> published_;
  std::vector<std::string> created_;
  std::string removed_why_;
  std::deque<std::function<void()>> timers_;
  int next_ = 0;
};

TEST_F(PlacementGroupsTest, StrictSpreadPutsEachBundleOnItsOwnNode) {
  auto g = Group(rpc::STRICT_SPREAD, {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}}});
  ASSERT_TRUE(A().Create(g).ok());
  ASSERT_EQ(created_.size(), 1u);
  const auto& info = Last(g.pg_id());
  EXPECT_EQ(info.state(), rpc::PG_CREATED);
  std::set<std::string> used;
  for (const auto& b : info.bundles()) used.insert(b.node_id());
  EXPECT_EQ(used, (std::set<std::string>{"A", "B", "C"}));
  for (const char* n : {"A", "B", "C"}) EXPECT_DOUBLE_EQ(Free(n), 1);
  EXPECT_EQ(sent_[rpc::BUNDLE_PREPARE], 2);  // (A's own bundle needs no message)
  EXPECT_EQ(sent_[rpc::BUNDLE_COMMIT], 2);
  auto where = A().Locate(g.pg_id(), 1);
  EXPECT_EQ(where.kind, PlacementGroups::Where::kNode);
  EXPECT_EQ(where.node, info.bundles(1).node_id());
}

TEST_F(PlacementGroupsTest, PackPrefersOneNodeAndStrictPackWaitsForOne) {
  auto pack = Group(rpc::PACK, {{{"CPU", 1}}, {{"CPU", 1}}});
  ASSERT_TRUE(A().Create(pack).ok());
  EXPECT_EQ(Last(pack.pg_id()).bundles(0).node_id(), Last(pack.pg_id()).bundles(1).node_id());
  auto strict = Group(rpc::STRICT_PACK, {{{"CPU", 2}}, {{"CPU", 1}}});  // 3 CPUs: no node has them
  ASSERT_TRUE(A().Create(strict).ok());
  EXPECT_EQ(Last(strict.pg_id()).state(), rpc::PG_PENDING);
  EXPECT_NE(Last(strict.pg_id()).why_pending().find("STRICT_PACK"), std::string::npos);
  EXPECT_EQ(A().Locate(strict.pg_id(), 0).kind, PlacementGroups::Where::kWait);
  EXPECT_EQ(timers_.size(), 1u);  // it tries again later
}

TEST_F(PlacementGroupsTest, ARefusalInPhaseOneGivesEverythingBackAndRetries) {
  // A believes B is free; B's CPUs were taken since (a stale view).
  std::vector<int> gpus;
  ASSERT_TRUE(nodes_["B"].ledger->TryAcquire(ResourceSet({{"CPU", 2}}), &gpus));
  seen_free_["B"] = ResourceSet({{"CPU", 2}});
  seen_free_["C"] = ResourceSet({{"CPU", 0}});
  auto g = Group(rpc::STRICT_SPREAD, {{{"CPU", 1}}, {{"CPU", 1}}});
  ASSERT_TRUE(A().Create(g).ok());
  EXPECT_TRUE(created_.empty());
  EXPECT_DOUBLE_EQ(Free("A"), 2);  // A's prepared bundle was given back
  EXPECT_NE(Last(g.pg_id()).why_pending().find("refused"), std::string::npos);
  EXPECT_EQ(sent_[rpc::BUNDLE_COMMIT], 0);  // nothing was committed anywhere
  // B frees up: the retry places it.
  nodes_["B"].ledger->Release(ResourceSet({{"CPU", 2}}), gpus);
  RunTimers();
  ASSERT_EQ(created_.size(), 1u);
  EXPECT_EQ(Last(g.pg_id()).state(), rpc::PG_CREATED);
}

TEST_F(PlacementGroupsTest, ACommittedGroupRemovedGivesBackEveryBundle) {
  auto g = Group(rpc::SPREAD, {{{"CPU", 2}}, {{"CPU", 2}}});
  ASSERT_TRUE(A().Create(g).ok());
  ASSERT_EQ(created_.size(), 1u);
  ASSERT_TRUE(A().Remove(g.pg_id()).ok());
  EXPECT_EQ(Last(g.pg_id()).state(), rpc::PG_REMOVED);
  for (const char* n : {"A", "B", "C"}) EXPECT_DOUBLE_EQ(Free(n), 2);
  int returned = 0;
  for (auto& [id, n] : nodes_) returned += static_cast<int>(n.returned.size());
  EXPECT_EQ(returned, 2);
  EXPECT_EQ(A().Locate(g.pg_id(), 0).kind, PlacementGroups::Where::kGone);
  EXPECT_NE(removed_why_.find("removed"), std::string::npos);
  EXPECT_FALSE(A().Coordinates(g.pg_id()));  // nothing kept for it
}

TEST_F(PlacementGroupsTest, ADeadNodesBundlesArePlacedAgain) {
  auto g = Group(rpc::STRICT_SPREAD, {{{"CPU", 1}}, {{"CPU", 1}}});
  ASSERT_TRUE(A().Create(g).ok());
  std::string lost = Last(g.pg_id()).bundles(1).node_id();
  ASSERT_NE(lost, "A");
  nodes_[lost].up = false;
  A().OnNodeDead(lost);
  const auto& info = Last(g.pg_id());
  EXPECT_EQ(info.state(), rpc::PG_CREATED);
  EXPECT_NE(info.bundles(1).node_id(), lost);
  EXPECT_NE(info.bundles(1).node_id(), info.bundles(0).node_id());  // still one node per bundle
  EXPECT_EQ(created_.size(), 2u);
}

TEST_F(PlacementGroupsTest, AGroupGoesWithItsCreatorUnlessDetached) {
  auto mine = Group(rpc::PACK, {{{"CPU", 1}}});
  mine.set_creator_id("driver-1");
  auto kept = Group(rpc::PACK, {{{"CPU", 1}}});
  kept.set_creator_id("driver-1");
  kept.set_detached(true);
  ASSERT_TRUE(A().Create(mine).ok());
  ASSERT_TRUE(A().Create(kept).ok());
  A().OnClientGone("driver-1");
  EXPECT_EQ(Last(mine.pg_id()).state(), rpc::PG_REMOVED);
  EXPECT_EQ(Last(kept.pg_id()).state(), rpc::PG_CREATED);
}

TEST_F(PlacementGroupsTest, BadGroupsAreRefusedWithTheReason) {
  auto empty = Group(rpc::PACK, {});
  EXPECT_NE(A().Create(empty).message().find("at least one bundle"), std::string::npos);
  auto nothing = Group(rpc::PACK, {{{"CPU", 0}}});
  EXPECT_NE(A().Create(nothing).message().find("reserves no resources"), std::string::npos);
  auto sneaky = Group(rpc::PACK, {{{"CPU_group_x", 1}}});
  EXPECT_NE(A().Create(sneaky).message().find("_group_"), std::string::npos);
  auto ok = Group(rpc::PACK, {{{"CPU", 1}}});
  ASSERT_TRUE(A().Create(ok).ok());
  EXPECT_EQ(A().Create(ok).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(A().Locate(ok.pg_id(), 5).kind, PlacementGroups::Where::kGone);  // no bundle 5
  auto big = A().Locate(ok.pg_id(), 0, ResourceSet({{"CPU", 2}}));
  EXPECT_EQ(big.kind, PlacementGroups::Where::kGone);
  EXPECT_NE(big.why.find("more than bundle 0"), std::string::npos);
}

TEST_F(PlacementGroupsTest, AnotherNodesGroupIsLookedUpUntilPlaced) {
  auto g = Group(rpc::PACK, {{{"CPU", 1}}});
  ASSERT_TRUE(nodes_["B"].pgs->Create(g).ok());  // B coordinates it
  EXPECT_EQ(A().Locate(g.pg_id(), 0).kind, PlacementGroups::Where::kWait);  // looked up in the GCS now ...
  auto where = A().Locate(g.pg_id(), 0);                                     // ... and known at the next dispatch
  EXPECT_EQ(where.kind, PlacementGroups::Where::kNode);
  EXPECT_EQ(where.node, Last(g.pg_id()).bundles(0).node_id());
}

}  // namespace phalanx::scheduler
