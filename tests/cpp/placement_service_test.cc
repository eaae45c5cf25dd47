// PlacementService alone (tests/cpp/service_fixture.h), on a node with 4
// CPUs and no other node: a group that fits is placed, its ready object made,
// the node's record announced and the group's record in the GCS; removing it
// gives its resources back and ends its tasks and actors here, naming the
// group; a client's exit removes the groups it made but not detached ones;
// a group whose ready value is too large fails its ready object saying so.
#include "scheduler/placement_service.h"

#include "core/status_proto.h"
#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class Nobody final : public ClusterResources {
 public:
  std::vector<std::pair<std::string, ResourceSet>> FreeElsewhere() const override { return {}; }
};

class GroupEffects final : public GroupTasks, public GroupActors, public NodeAnnouncer {
 public:
  void FailGroup(const std::string& pg, const std::string& why) override { log.push_back("tasks " + why); }
  void Redispatch() override { ++redispatches; }
  void KillGroup(const std::string& pg, const std::string& why) override { log.push_back("actors " + why); }
  void AnnounceSoon() override { ++announced; }
  std::vector<std::string> log;
  int redispatches = 0, announced = 0;
};

class PlacementServiceTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    service_ = std::make_unique<PlacementService>(io_, kNode, &ledger_, &peers_, &nobody_, gcs_.get(), &table(),
                                                  &effects_, &effects_, &effects_);
    service_->AddRoutes(router_);
  }
  void TearDown() override {
    service_->Stop();
    io_.run_for(std::chrono::milliseconds(20));
    ServiceTest::TearDown();
  }
  // A group of `n` bundles of one CPU each, made by the test's client.
  std::string Create(char tag, int n, bool detached = false, const std::string& ready_value = "") {
    rpc::CreatePlacementGroup m;
    auto* info = m.mutable_info();
    std::string pg(kTaskIdSize, tag);
    info->set_pg_id(pg);
    info->set_strategy(rpc::PACK);
    info->set_detached(detached);
    info->set_ready_value(ready_value);
    for (int i = 0; i < n; ++i) (*info->add_bundles()->mutable_resources())["CPU"] = 1;
    Send(rpc::PG_CREATE, 0, m);
    return pg;
  }
  static std::string Ready(const std::string& pg) { return MakeObjectId(pg, 1); }

  ResourceLedger ledger_{ResourceSet({{"CPU", 4}})};
  Nobody nobody_;
  GroupEffects effects_;
  std::unique_ptr<PlacementService> service_;
};

TEST_F(PlacementServiceTest, AGroupThatFitsIsPlacedItsReadyObjectMadeAndItsRecordWritten) {
  std::string pg = Create('g', 2);
  ASSERT_TRUE(RunUntil([&] { return table().IsReady(Ready(pg)); }));
  rpc::ObjectValue v;
  table().Describe(Ready(pg), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_INLINE);
  EXPECT_DOUBLE_EQ(ledger_.available().Get("CPU"), 2);
  EXPECT_GT(effects_.announced, 0) << "others hear of the reserved CPUs now";
  EXPECT_TRUE(client_->holds.count(Ready(pg))) << "the creator holds its ready ref";
  bool written = false;
  ASSERT_TRUE(RunUntil([&] {
    gcs_->GetPlacementGroup(pg, [&](Result<rpc::PlacementGroupInfo> r) {
      written = r.ok() && r.value().state() == rpc::PG_CREATED;
    });
    io_.run_for(std::chrono::milliseconds(10));
    return written;
  }));
}

TEST_F(PlacementServiceTest, RemovingAGroupGivesBackItsResourcesAndEndsItsTasksAndActorsHere) {
  std::string pg = Create('r', 3);
  ASSERT_TRUE(RunUntil([&] { return table().IsReady(Ready(pg)); }));
  rpc::PlacementGroupRequest m;
  m.set_pg_id(pg);
  Send(rpc::PG_REMOVE, 9, m);
  auto r = Reply<rpc::PlacementGroupReply>(rpc::PG_REMOVE, 9);
  EXPECT_TRUE(FromProto(r.status()).ok()) << FromProto(r.status()).ToString();
  EXPECT_DOUBLE_EQ(ledger_.available().Get("CPU"), 4);
  const std::string why = "its placement group was removed (" + ToHex(pg).substr(0, 12) + ")";
  // (an actor's calls say so in Ray's words: "the actor died because ...")
  EXPECT_EQ(effects_.log, (std::vector<std::string>{"actors the actor died because " + why, "tasks " + why}));
}

TEST_F(PlacementServiceTest, AClientsExitRemovesTheGroupsItMadeButNotDetachedOnes) {
  std::string mine = Create('m', 1), kept = Create('d', 1, /*detached=*/true);
  ASSERT_TRUE(RunUntil([&] { return table().IsReady(Ready(mine)) && table().IsReady(Ready(kept)); }));
  EXPECT_DOUBLE_EQ(ledger_.available().Get("CPU"), 2);
  service_->OnClientGone(*client_, "driver process 4242 exited");
  EXPECT_DOUBLE_EQ(ledger_.available().Get("CPU"), 3) << "the detached group keeps its CPU";
}

TEST_F(PlacementServiceTest, AGroupWhoseReadyValueIsTooLargeFailsItsReadyObjectSayingSo) {
  std::string pg = Create('v', 1, false, std::string(65 * 1024, 'x'));
  rpc::ObjectValue v;
  table().Describe(Ready(pg), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("64 KiB"), std::string::npos) << v.error();
  EXPECT_DOUBLE_EQ(ledger_.available().Get("CPU"), 4) << "nothing was reserved";
}

}  // namespace
}  // namespace phalanx::scheduler
