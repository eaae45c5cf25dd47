// The PeerManager alone: two (or three) of them in one process, each with
// an in-memory object layer, its own Router and fakes of the node's tasks and
// actors, meeting through a real redis-server's node table over loopback
// TCP. A call reaches the other node's route and brings back its reply; a
// cancel and a kill from another node reach this node's tasks and actors
// (the kill's outcome goes back); a node without the cluster token is
// refused before anything acts; a node that stops heartbeating is declared
// dead once, its actors settled and the GCS told; a call to it then fails
// naming it.
#include "scheduler/peer_manager.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/ids.h"
#include "core/status_proto.h"
#include "objectstore/shm_region.h"
#include "tests/cpp/test_util.h"

namespace phalanx::scheduler {
namespace {

namespace asio = boost::asio;

class FakeTasks final : public ForwardedTasks {
 public:
  void Submit(rpc::TaskSpec spec) override { submitted.push_back(spec.task_id()); }
  void Cancel(const rpc::CancelTask& m) override { cancelled.push_back(m.task_id()); }
  void OnForwardedDone(const std::string& task_id, rpc::ForwardTaskReply) override { done.push_back(task_id); }
  void OnForwardFailed(const std::string& task_id, const std::string& why, bool) override {
    failed.push_back(task_id + ": " + why);
  }
  void Redispatch() override {}
  const ResourceSet& total() const override { return total_; }
  const ResourceSet& available() const override { return total_; }
  std::vector<std::string> submitted, cancelled, done, failed;

 private:
  ResourceSet total_{{{"CPU", 1}}};
};

class FakeActors final : public NodeActors {
 public:
  void Kill(const std::string& actor_id, bool no_restart, std::function<void(const Status&)> done) override {
    killed.push_back(actor_id + (no_restart ? " for good" : ""));
    done(Status::NotFound("no actor " + actor_id + " here"));
  }
  void OnNodeDead(const std::string& node_id, const std::string& why) override { node_deaths.push_back(why); }
  void RestartOrphan(const rpc::ActorInfo&, const std::string&) override {}
  std::vector<std::string> killed, node_deaths;
};

class DeathLog final : public PeerEvents {
 public:
  void OnNodeDead(const std::string& node_id) override { dead.push_back(node_id); }
  std::vector<std::string> dead;
};

// One node: its object layer, router, fakes and PeerManager.
struct Node {
  std::string id;
  std::unique_ptr<objectstore::ObjectManager> om;
  Router router;
  FakeTasks tasks;
  FakeActors actors;
  DeathLog events;
  std::unique_ptr<PeerManager> peers;
};

class PeerManagerTest : public ::testing::Test {
 protected:
  static constexpr char kToken[] = "peer-manager-test-token";

  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>(kToken);
    redis_client_ = std::make_unique<RedisClient>(io_, "127.0.0.1", redis_->port(), kToken);
    ASSERT_TRUE(redis_client_->Connect(2000).ok());
    gcs_ = std::make_unique<GcsClient>(redis_client_.get());
  }
  void TearDown() override {
    for (auto& n : nodes_) n->peers->Stop();
    io_.run_for(std::chrono::milliseconds(20));
  }

  // A node named `name` (padded to a node id) listening on loopback and registered in the GCS.
  Node& Add(const std::string& name, const std::string& token = kToken, int64_t dead_after_ms = 60000) {
    auto n = std::make_unique<Node>();
    n->id = name + std::string(16 - name.size(), '.');
    auto region = objectstore::ShmRegion::Create(8 << 20, ("peers-" + name).c_str());
    EXPECT_TRUE(region.ok());
    // (Its object layer sends nothing of its own in these tests: no peers for it.)
    n->om = std::make_unique<objectstore::ObjectManager>(
        io_, n->id, std::make_unique<objectstore::ObjectStore>(std::move(region).value()), nullptr, nullptr, nullptr);
    n->peers = std::make_unique<PeerManager>(io_, n->id, "127.0.0.1", token, nullptr, dead_after_ms, &n->tasks,
                                             &n->actors, n->om.get(), gcs_.get(), &n->router, &n->events);
    n->peers->AddRoutes(n->router);
    EXPECT_TRUE(n->peers->Listen().ok());
    Announce(*n);
    nodes_.push_back(std::move(n));
    return *nodes_.back();
  }
  // `n`'s record in the node table, heartbeat now.
  void Announce(Node& n) {
    rpc::NodeInfo info;
    info.set_node_id(n.id);
    info.set_address("127.0.0.1");
    info.set_port(n.peers->port());
    info.set_alive(true);
    info.set_heartbeat_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    (*info.mutable_resources_total())["CPU"] = 1;
    (*info.mutable_resources_available())["CPU"] = 1;
    gcs_->RegisterNode(info);
  }
  // Runs the loop until `done` holds (up to 10 s), refreshing `who`'s view of the cluster meanwhile.
  bool RunUntil(const std::function<bool()>& done, Node* who = nullptr) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      if (who) who->peers->Refresh();
      io_.run_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // `a` sees `b` alive.
  void Meet(Node& a, Node& b) { ASSERT_TRUE(RunUntil([&] { return a.peers->IsAlive(b.id); }, &a)); }

  asio::io_context io_;
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<RedisClient> redis_client_;
  std::unique_ptr<GcsClient> gcs_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(PeerManagerTest, ACallReachesTheOtherNodesRouteAndBringsBackItsReply) {
  Node& a = Add("a");
  Node& b = Add("b");
  std::vector<std::string> heard;
  b.router.OnPeer(rpc::STREAM_CREDIT, "credit", [&](const char* body, size_t len, const PeerReply& reply) {
    rpc::StreamCredit m;
    if (!m.ParseFromArray(body, static_cast<int>(len))) return false;
    heard.push_back(m.task_id());
    rpc::StreamCreditReply r;
    r.set_consumed(m.need() + 1);
    reply(r);
    return true;
  });
  Meet(a, b);
  rpc::StreamCredit m;
  m.set_task_id(std::string(kTaskIdSize, 't'));
  m.set_need(41);
  Result<std::string> got = Status::Internal("no reply yet");
  bool done = false;
  a.peers->Call(b.id, rpc::STREAM_CREDIT, m, 5000, [&](Result<std::string> r) {
    got = std::move(r);
    done = true;
  });
  ASSERT_TRUE(RunUntil([&] { return done; }));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  rpc::StreamCreditReply r;
  ASSERT_TRUE(r.ParseFromString(got.value()));
  EXPECT_EQ(r.consumed(), 42u);
  EXPECT_EQ(heard, std::vector<std::string>{std::string(kTaskIdSize, 't')});
}

TEST_F(PeerManagerTest, ACancelAndAKillFromAnotherNodeReachThisNodesTasksAndActors) {
  Node& a = Add("a");
  Node& b = Add("b");
  Meet(a, b);
  rpc::CancelTask c;
  c.set_task_id(std::string(kTaskIdSize, 'c'));
  a.peers->CancelTask(b.id, c);
  Status killed = Status::Internal("not answered");
  bool answered = false;
  a.peers->KillActor(b.id, "actor-1", /*no_restart=*/true, [&](const Status& st) {
    killed = st;
    answered = true;
  });
  ASSERT_TRUE(RunUntil([&] { return answered && !b.tasks.cancelled.empty(); }));
  EXPECT_EQ(b.tasks.cancelled, std::vector<std::string>{std::string(kTaskIdSize, 'c')});
  EXPECT_EQ(b.actors.killed, std::vector<std::string>{"actor-1 for good"});
  EXPECT_EQ(killed.code(), StatusCode::kNotFound) << "the outcome on b comes back to a: " << killed.ToString();
  EXPECT_NE(killed.message().find("actor-1"), std::string::npos);
}

TEST_F(PeerManagerTest, ANodeWithoutTheClusterTokenIsRefusedBeforeAnythingActs) {
  Node& b = Add("b");
  Node& intruder = Add("x", "not-the-token");
  Meet(intruder, b);
  rpc::CancelTask c;
  c.set_task_id(std::string(kTaskIdSize, 'c'));
  bool done = false;
  Result<std::string> got = std::string();
  intruder.peers->Call(b.id, rpc::CANCEL_TASK, c, 3000, [&](Result<std::string> r) {
    got = std::move(r);
    done = true;
  });
  ASSERT_TRUE(RunUntil([&] { return done; }));
  EXPECT_FALSE(got.ok()) << "b answered a node that could not prove the token";
  EXPECT_TRUE(b.tasks.cancelled.empty()) << "b acted on it";
}

TEST_F(PeerManagerTest, ANodeThatStopsHeartbeatingIsDeclaredDeadOnceAndCallsToItFailNamingIt) {
  Node& a = Add("a", kToken, /*dead_after_ms=*/300);
  Node& b = Add("b");
  Meet(a, b);
  // b says nothing more: after 300 ms a declares it dead, once.
  ASSERT_TRUE(RunUntil([&] { return !a.events.dead.empty(); }, &a));
  for (int i = 0; i < 5; ++i) {
    a.peers->Refresh();
    io_.run_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(a.events.dead, std::vector<std::string>{b.id});
  ASSERT_EQ(a.actors.node_deaths.size(), 1u);
  EXPECT_NE(a.actors.node_deaths[0].find(ToHex(b.id).substr(0, 12)), std::string::npos) << a.actors.node_deaths[0];
  bool marked = false;
  gcs_->GetAllNodes([&](Result<std::vector<rpc::NodeInfo>> all) {
    ASSERT_TRUE(all.ok());
    for (const auto& n : all.value()) {
      if (n.node_id() == b.id) marked = !n.alive();
    }
  });
  ASSERT_TRUE(RunUntil([&] { return marked; })) << "the GCS was not told";
  bool done = false;
  Result<std::string> got = std::string();
  a.peers->Call(b.id, rpc::CANCEL_TASK, rpc::CancelTask(), 3000, [&](Result<std::string> r) {
    got = std::move(r);
    done = true;
  });
  ASSERT_TRUE(done) << "a call to a dead node fails at once";
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find(ToHex(b.id).substr(0, 12)), std::string::npos) << got.status().ToString();
}

}  // namespace
}  // namespace phalanx::scheduler
