// Inspection alone (tests/cpp/service_fixture.h), over an in-memory object
// layer and a fake task queue: the counters say what the node holds and
// runs; `phalanx memory` lists this node's objects largest first with what
// keeps each (a driver's reference, a task's argument, the lineage, a
// mapping); asked for every node, it asks each other live node the GCS
// lists, and a node that does not answer is named in its part of the answer.
#include "scheduler/inspection.h"

#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class FakeTaskInspection final : public TaskInspection {
 public:
  TaskManagerStats Stats() const override { return stats; }
  const ResourceSet& total() const override { return total_; }
  const ResourceSet& available() const override { return total_; }
  void ForEachArgument(const std::function<void(const std::string&, const std::string&, bool, bool)>& fn)
      const override {
    for (const auto& [id, task] : args) fn(id, task, /*running=*/true, /*lineage=*/false);
  }
  void TraceInFlight(std::string*, size_t) const override {}
  const Lineage& lineage() const override { return lineage_; }
  TaskManagerStats stats;
  std::vector<std::pair<std::string, std::string>> args;  // (object id, task name)

 private:
  ResourceSet total_{{{"CPU", 4}}};
  Lineage lineage_{1 << 20};
};

class NoDeaths final : public WorkerDeaths {
 public:
  void OnWorkerDied(Worker*, const std::string&) override {}
};

class InspectionTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    steps_ = std::make_unique<collectives::ReduceSteps>(io_, &table(), &om_->store(), &om_->transfer(), kNode);
    reduces_ = std::make_unique<collectives::ReduceManager>(io_, &table(), &om_->store(), 1024,
                                                            nullptr, nullptr);
    allreduces_ = std::make_unique<collectives::Allreduces>(io_, &table(), &om_->store(), reduces_.get(),
                                                            nullptr, nullptr);
    streams_ = std::make_unique<StreamTable>(io_, &table());
    pool_ = std::make_unique<WorkerPool>(io_, WorkerPoolOptions{"/bin/false", "", "/nonexistent", "/tmp", "/tmp", {}},
                                         &deaths_);
    inspection_ = std::make_unique<Inspection>(
        kNode, "127.0.0.1", "/nonexistent-session",
        InspectedParts{&tasks_, om_.get(), steps_.get(), reduces_.get(), allreduces_.get(), streams_.get(),
                       pool_.get(), &clients_},
        gcs_.get(), &peers_);
    inspection_->AddRoutes(router_);
  }
  void TearDown() override {
    reduces_->Stop("test over");
    ServiceTest::TearDown();
  }
  void Put(const std::string& id, const std::string& data, bool store) {
    table().AddRef(id);
    if (store) {
      ASSERT_TRUE(table().PutInStore(id, data, {}).ok());
    } else {
      table().PutInline(id, data, {});
    }
  }

  FakeTaskInspection tasks_;
  NoDeaths deaths_;
  std::unique_ptr<collectives::ReduceSteps> steps_;
  std::unique_ptr<collectives::ReduceManager> reduces_;
  std::unique_ptr<collectives::Allreduces> allreduces_;
  std::unique_ptr<StreamTable> streams_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<Inspection> inspection_;
};

TEST_F(InspectionTest, TheCountersSayWhatTheNodeHoldsAndRuns) {
  Put(ObjectOf(client_->client_id, 1), std::string(200 << 10, 's'), /*store=*/true);
  Put(ObjectOf(client_->client_id, 2), "tiny", /*store=*/false);
  tasks_.stats.queued = 3;
  tasks_.stats.running = 2;
  Send(rpc::GET_STATS, 1, rpc::StatsReply());
  auto r = Reply<rpc::StatsReply>(rpc::GET_STATS, 1);
  EXPECT_EQ(r.store_objects(), 1u);
  EXPECT_GE(r.store_used(), 200u << 10);
  EXPECT_EQ(r.inline_objects(), 1u);
  EXPECT_EQ(r.tasks_queued(), 3u);
  EXPECT_EQ(r.tasks_running(), 2u);
  EXPECT_EQ(r.store_capacity(), om_->store().Stats().capacity);
}

TEST_F(InspectionTest, MemoryListsThisNodesObjectsLargestFirstWithWhatKeepsEach) {
  const std::string big = ObjectOf(client_->client_id, 1), small = ObjectOf(client_->client_id, 2);
  Put(big, std::string(300 << 10, 'b'), true);
  Put(small, std::string(100, 's'), false);
  client_->holds.insert(big);           // (the reference Put counted is the driver's)
  tasks_.args.emplace_back(small, "f");  // (and the small one's, a running task's argument)
  rpc::MemoryRequest m;
  Send(rpc::MEMORY_SUMMARY, 2, m);
  auto r = Reply<rpc::MemoryReply>(rpc::MEMORY_SUMMARY, 2);
  ASSERT_EQ(r.nodes_size(), 1);
  const rpc::NodeMemory& n = r.nodes(0);
  EXPECT_EQ(n.node_id(), kNode);
  ASSERT_EQ(n.list_size(), 2);
  EXPECT_EQ(n.list(0).object_id(), big) << "largest first";
  EXPECT_EQ(n.list(0).where(), "store");
  ASSERT_GE(n.list(0).holders_size(), 1);
  EXPECT_EQ(n.list(0).holders(0).kind(), "driver");
  EXPECT_EQ(n.list(0).holders(0).who(), "PID 4242");
  EXPECT_EQ(n.list(1).where(), "inline");
  bool argument = false;
  for (const auto& h : n.list(1).holders()) argument = argument || (h.kind() == "task argument" && h.who() == "f (running)");
  EXPECT_TRUE(argument) << n.list(1).DebugString();
}

TEST_F(InspectionTest, AskedForEveryNodeItAsksEachOtherLiveNodeAndNamesOneThatDoesNotAnswer) {
  rpc::NodeInfo other;
  other.set_node_id("other-node-00001");
  other.set_address("127.0.0.2");
  other.set_alive(true);
  gcs_->RegisterNode(other);
  rpc::NodeInfo dead = other;
  dead.set_node_id("dead-node-000001");
  dead.set_alive(false);
  gcs_->RegisterNode(dead);
  peers_.answer = [](const testing::RecordingPeers::Sent& s) -> Result<std::string> {
    return Status::Unavailable("node " + s.node + " did not answer within 5 s");
  };
  rpc::MemoryRequest m;
  m.set_all_nodes(true);
  Send(rpc::MEMORY_SUMMARY, 3, m);
  auto r = Reply<rpc::MemoryReply>(rpc::MEMORY_SUMMARY, 3);
  ASSERT_EQ(peers_.sent.size(), 1u) << "only the live node is asked";
  EXPECT_EQ(peers_.sent[0].node, "other-node-00001");
  EXPECT_EQ(peers_.sent[0].type, rpc::MEMORY_SUMMARY);
  ASSERT_EQ(r.nodes_size(), 2);
  EXPECT_EQ(r.nodes(1).node_id(), "other-node-00001");
  EXPECT_NE(r.nodes(1).error().find("did not answer"), std::string::npos) << r.nodes(1).error();
}

}  // namespace
}  // namespace phalanx::scheduler
