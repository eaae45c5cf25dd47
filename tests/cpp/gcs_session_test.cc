// GcsSession alone: this node's side of a real redis-server, over fakes of
// the peers, the task queue and the actors and a real (in-memory) object
// layer. Start registers the node with its resources and figures; a change
// announced twice in one turn is one write at its end; ended task records
// wait for the next heartbeat and go in one batch, pending and running
// ones never; when redis-server restarts empty the node, its clients and its
// functions are re-published and every node's silence is forgiven; Close
// marks the node dead.
#include "scheduler/gcs_session.h"

#include "scheduler/lineage.h"
#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class FakePeers final : public PeerView {
 public:
  int port() const override { return 4321; }
  void Refresh() override { ++refreshes; }
  void Forgive() override { ++forgiven; }
  size_t peers_alive() const override { return alive; }
  int refreshes = 0, forgiven = 0;
  size_t alive = 2;
};

class FakeTasks final : public TaskInspection {
 public:
  TaskManagerStats Stats() const override { return stats; }
  const ResourceSet& total() const override { return total_; }
  const ResourceSet& available() const override { return available_; }
  void ForEachArgument(const std::function<void(const std::string&, const std::string&, bool, bool)>&) const override {}
  void TraceInFlight(std::string*, size_t) const override {}
  const Lineage& lineage() const override { return lineage_; }
  TaskManagerStats stats;

 private:
  ResourceSet total_{{{"CPU", 8}}};
  ResourceSet available_{{{"CPU", 5}}};
  Lineage lineage_{1 << 20};
};

class FakeActors final : public ActorCensus {
 public:
  size_t num_alive() const override { return 2; }
  void AnnounceAll() override { ++announced; }
  int announced = 0;
};

class NoDeaths final : public WorkerDeaths {
 public:
  void OnWorkerDied(Worker*, const std::string&) override {}
};

class GcsSessionTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    options_.node_ip = "127.0.0.1";
    options_.socket_path = "/tmp/gcs-session-test.sock";
    options_.session_dir = "/tmp";
    options_.redis_port = redis_->port();
    options_.heartbeat_ms = 100;
    options_.gcs_reconnect_timeout_ms = 20000;
    pool_ = std::make_unique<WorkerPool>(io_, WorkerPoolOptions{"/bin/false", "", "/nonexistent", "/tmp", "/tmp", {}},
                                         &deaths_);
    session_redis_ = std::make_unique<RedisClient>(io_, "127.0.0.1", redis_->port());
    session_gcs_ = std::make_unique<GcsClient>(session_redis_.get());
    functions_ = std::make_unique<FunctionTable>(io_, session_gcs_.get());
    session_ = std::make_unique<GcsSession>(
        io_, kNode, options_,
        SessionParts{session_redis_.get(), session_gcs_.get(), &peers_view_, &tasks_, &actors_, pool_.get(), om_.get(),
                     functions_.get(), &clients_});
    ASSERT_TRUE(session_->Connect().ok());
  }
  void TearDown() override {
    session_->Stop();
    io_.run_for(std::chrono::milliseconds(20));
    ServiceTest::TearDown();
  }
  // The node's record in the GCS, read through the test's own connection (up to 10 s for `want`).
  bool NodeRecord(rpc::NodeInfo* out, const std::function<bool(const rpc::NodeInfo&)>& want) {
    return RunUntil([&] {
      bool found = false;
      gcs_->GetAllNodes([&](Result<std::vector<rpc::NodeInfo>> all) {
        if (!all.ok()) return;
        for (const auto& n : all.value()) {
          if (n.node_id() == kNode && want(n)) {
            *out = n;
            found = true;
          }
        }
      });
      io_.run_for(std::chrono::milliseconds(10));
      return found;
    });
  }
  rpc::TaskRecord Record(char tag, rpc::TaskState state) {
    rpc::TaskRecord r;
    r.set_task_id(std::string(kTaskIdSize, tag));
    r.set_state(state);
    return r;
  }
  bool HasRecord(char tag) {
    bool has = false, answered = false;
    gcs_->GetTaskRecord(std::string(kTaskIdSize, tag), [&](Result<rpc::TaskRecord> r) {
      has = r.ok();
      answered = true;
    });
    RunUntil([&] { return answered; });
    return has;
  }

  RayletOptions options_;
  FakePeers peers_view_;
  FakeTasks tasks_;
  FakeActors actors_;
  NoDeaths deaths_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<FunctionTable> functions_;
  std::unique_ptr<RedisClient> session_redis_;
  std::unique_ptr<GcsClient> session_gcs_;
  std::unique_ptr<GcsSession> session_;
};

TEST_F(GcsSessionTest, StartRegistersTheNodeWithItsResourcesAndFigures) {
  session_->Start();
  rpc::NodeInfo n;
  ASSERT_TRUE(NodeRecord(&n, [](const rpc::NodeInfo& n) { return n.alive(); }));
  EXPECT_EQ(n.port(), 4321);
  EXPECT_EQ(n.address(), "127.0.0.1");
  EXPECT_DOUBLE_EQ(n.resources_total().at("CPU"), 8);
  EXPECT_DOUBLE_EQ(n.resources_available().at("CPU"), 5);
  EXPECT_EQ(n.actors_alive(), 2);
  EXPECT_EQ(n.peers_alive(), 2u) << "the other nodes it sees";
  EXPECT_EQ(n.resources_total().at("object_store_memory"), static_cast<double>(om_->store().Stats().capacity));
  EXPECT_TRUE(RunUntil([&] { return peers_view_.refreshes > 0; })) << "each heartbeat refreshes the peers' view";
  peers_view_.alive = 3;  // a node joined: the next heartbeat's record says so
  EXPECT_TRUE(NodeRecord(&n, [](const rpc::NodeInfo& n) { return n.peers_alive() == 3; }));
}

TEST_F(GcsSessionTest, EndedTaskRecordsGoInAtTheNextHeartbeatPendingOnesNever) {
  session_->Start();
  session_->RecordTask(Record('a', rpc::TASK_FINISHED));
  session_->RecordTask(Record('b', rpc::TASK_FAILED));
  session_->RecordTask(Record('p', rpc::TASK_PENDING));
  session_->RecordTask(Record('r', rpc::TASK_RUNNING));
  ASSERT_TRUE(RunUntil([&] { return HasRecord('a') && HasRecord('b'); }));
  EXPECT_FALSE(HasRecord('p'));
  EXPECT_FALSE(HasRecord('r'));
  session_->ForgetTask(std::string(kTaskIdSize, 'a'));
  EXPECT_TRUE(RunUntil([&] { return !HasRecord('a'); })) << "a forgotten task's record goes too";
}

TEST_F(GcsSessionTest, WhenRedisServerComesBackEmptyWhatTheNodeOwnsIsPublishedAgain) {
  functions_->AddRoutes(router_);
  session_->Start();
  rpc::RegisterFunction f;
  f.set_function_id("fn-1");
  f.set_name("train_step");
  f.set_pickled("code");
  Send(rpc::REGISTER_FUNCTION, 0, f);
  rpc::NodeInfo n;
  ASSERT_TRUE(NodeRecord(&n, [](const rpc::NodeInfo& n) { return n.alive(); }));
  redis_->Kill();
  redis_->Start();  // the same port, nothing kept
  ASSERT_TRUE(RunUntil([&] { return actors_.announced > 0; })) << "the session never saw redis-server come back";
  EXPECT_EQ(peers_view_.forgiven, 1) << "nobody could heartbeat meanwhile";
  // (Read through a new connection: the test's own went with the old server.)
  RedisClient fresh_redis(io_, "127.0.0.1", redis_->port());
  ASSERT_TRUE(fresh_redis.Connect(2000).ok());
  GcsClient fresh(&fresh_redis);
  bool node_back = false, client_back = false, function_back = false;
  ASSERT_TRUE(RunUntil([&] {
    fresh.GetAllNodes([&](Result<std::vector<rpc::NodeInfo>> all) {
      if (!all.ok()) return;
      for (const auto& n : all.value()) node_back = node_back || (n.node_id() == kNode && n.alive());
    });
    fresh.ClientExists(client_->client_id, [&](Result<bool> r) { client_back = r.ok() && r.value(); });
    fresh.GetFunction("fn-1", [&](Result<rpc::RegisterFunction> r) {
      function_back = r.ok() && r.value().name() == "train_step";
    });
    io_.run_for(std::chrono::milliseconds(20));
    return node_back && client_back && function_back;
  })) << "node " << node_back << ", client " << client_back << ", function " << function_back;
}

TEST_F(GcsSessionTest, CloseMarksTheNodeDead) {
  session_->Start();
  rpc::NodeInfo n;
  ASSERT_TRUE(NodeRecord(&n, [](const rpc::NodeInfo& n) { return n.alive(); }));
  session_->Stop();
  session_->Close();
  ASSERT_TRUE(NodeRecord(&n, [](const rpc::NodeInfo& n) { return !n.alive(); }));
}

}  // namespace
}  // namespace phalanx::scheduler
