// What the raylet's GCS link does when redis-server goes away (a real
// redis-server killed with SIGKILL and started again on the same port), and
// how ClusterView tells a dead node from a slow one.
#include <gtest/gtest.h>

#include <optional>

#include "core/ids.h"
#include "gcs/gcs_client.h"
#include "gcs/redis_client.h"
#include "scheduler/cluster_view.h"
#include "tests/cpp/test_util.h"

namespace phalanx {
namespace {

class ReconnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>("", /*aof=*/true);
    client_ = std::make_unique<RedisClient>(io_, "127.0.0.1", redis_->port());
    ASSERT_TRUE(client_->Connect(2000).ok());
  }
  void RunUntil(const std::function<bool()>& done, int seconds = 10) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!done() && std::chrono::steady_clock::now() < until) io_.run_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(done());
  }
  Result<RedisReply> Sync(const std::vector<std::string>& args) {
    std::optional<Result<RedisReply>> out;
    client_->Command(args, [&](Result<RedisReply> r) { out = std::move(r); });
    RunUntil([&] { return out.has_value(); });
    return *out;
  }
  boost::asio::io_context io_;
  // (the loop keeps running with nothing pending, as the raylet's does: the reconnect posts to it)
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_ = boost::asio::make_work_guard(io_);
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<RedisClient> client_;
};

TEST_F(ReconnectTest, KeepsCommandsWhileAwayAndSendsThemInOrderOnceBack) {
  int lost = 0, back = 0;
  std::string gave_up;
  client_->SetReconnect(10000, 0, [&](const Status&) { ++lost; }, [&] { ++back; });
  client_->SetDisconnectCallback([&](const Status& s) { gave_up = s.message(); });
  ASSERT_TRUE(Sync({"HSET", "k", "before", "1"}).ok());
  redis_->KillHard();
  RunUntil([&] { return client_->reconnecting(); });
  std::vector<std::string> order;
  for (int i = 0; i < 5; ++i) {
    client_->Command({"RPUSH", "list", std::to_string(i)}, [&, i](Result<RedisReply> r) {
      if (r.ok()) order.push_back(std::to_string(i));
    });
  }
  io_.run_for(std::chrono::milliseconds(500));  // (away for a while: nothing fails meanwhile)
  EXPECT_TRUE(order.empty());
  redis_->Start();
  RunUntil([&] { return order.size() == 5; });
  EXPECT_EQ(order, (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  EXPECT_EQ(lost, 1);
  EXPECT_EQ(back, 1);
  EXPECT_EQ(client_->reconnects(), 1);
  EXPECT_TRUE(gave_up.empty());
  auto before = Sync({"HGET", "k", "before"});  // (the AOF kept it)
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before.value().str, "1");
  auto list = Sync({"LRANGE", "list", "0", "-1"});
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list.value().elements.size(), 5u);
  EXPECT_EQ(list.value().elements[4].str, "4");
}

TEST_F(ReconnectTest, SubscriptionsAndObjectLocationWaitersSurviveAReconnect) {
  client_->SetReconnect(10000, 0, nullptr, nullptr);
  GcsClient gcs(client_.get());
  std::vector<std::string> got;
  bool subscribed = false;
  client_->Subscribe("chan", [&](const std::string&, const std::string& m) { got.push_back(m); },
                     [&] { subscribed = true; });
  RunUntil([&] { return subscribed; });
  int entries = 0;
  gcs.SubscribeObjectLocations("obj-1", [&](const rpc::ObjectDirectoryEntry& e) { entries += e.locations_size(); });
  redis_->KillHard();
  RunUntil([&] { return client_->reconnecting(); });
  redis_->Start();
  RunUntil([&] { return client_->connected(); });
  // Another process announces on the channel, and lists the object while we were away.
  boost::asio::io_context io2;
  RedisClient other(io2, "127.0.0.1", redis_->port());
  ASSERT_TRUE(other.Connect(2000).ok());
  GcsClient gcs2(&other);
  rpc::ObjectLocation loc;
  loc.set_node_id("n1");
  loc.set_complete(true);
  gcs2.AddObjectLocation("obj-1", 10, loc);
  io2.run_for(std::chrono::milliseconds(100));
  RunUntil([&] { return entries >= 1; });  // (the announcement arrives: subscribed again)
  RunUntil([&] {
    other.Command({"PUBLISH", "chan", "hello"});
    io2.run_for(std::chrono::milliseconds(20));
    return !got.empty();
  });
  EXPECT_EQ(got[0], "hello");
}

// What a reconnect callback reads must not miss a message published right
// after it read: when it runs, the channels are subscribed again.
TEST_F(ReconnectTest, ReconnectCallbacksRunOnceTheChannelsAreSubscribedAgain) {
  int receivers = -1;
  client_->SetReconnect(10000, 0, nullptr, [&] {
    redisContext* c = redisConnect("127.0.0.1", redis_->port());
    ASSERT_TRUE(c && !c->err);
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PUBLISH chan-b x"));
    ASSERT_NE(reply, nullptr);
    receivers = static_cast<int>(reply->integer);  // subscribers that got it
    freeReplyObject(reply);
    redisFree(c);
  });
  bool subscribed = false;
  for (const char* ch : {"chan-a", "chan-b", "chan-c"}) {
    client_->Subscribe(ch, [](const std::string&, const std::string&) {}, [&] { subscribed = true; });
  }
  RunUntil([&] { return subscribed; });
  for (int round = 0; round < 5; ++round) {
    redis_->KillHard();
    RunUntil([&] { return client_->reconnecting(); });
    receivers = -1;
    redis_->Start();
    RunUntil([&] { return receivers >= 0; });
    EXPECT_EQ(receivers, 1) << "round " << round;
  }
}

TEST_F(ReconnectTest, ResyncFeedsLocationsListedWhileAway) {
  client_->SetReconnect(10000, 0, nullptr, nullptr);
  GcsClient gcs(client_.get());
  int entries = 0;
  gcs.SubscribeObjectLocations("obj-2", [&](const rpc::ObjectDirectoryEntry& e) { entries += e.locations_size(); });
  io_.run_for(std::chrono::milliseconds(100));
  redis_->KillHard();
  RunUntil([&] { return client_->reconnecting(); });
  redis_->Start();
  {  // listed by another node before this client is back: its announcement is missed
    testing::RedisServer* r = redis_.get();
    redisContext* c = redisConnect("127.0.0.1", r->port());
    ASSERT_TRUE(c && !c->err);
    rpc::ObjectLocation loc;
    loc.set_node_id("n2");
    loc.set_complete(true);
    std::string v = loc.SerializeAsString();
    // (a server still loading its AOF answers LOADING: until it takes the write)
    bool written = false;
    for (int i = 0; i < 500 && !written; ++i) {
      auto* reply = static_cast<redisReply*>(redisCommand(c, "HSET objdir:%s size 10 %s %b", ToHex("obj-2").c_str(),
                                                          ToHex("n2").c_str(), v.data(), v.size()));
      written = reply != nullptr && reply->type != REDIS_REPLY_ERROR;
      if (reply) freeReplyObject(reply);
      if (!written) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    redisFree(c);
    ASSERT_TRUE(written);
  }
  RunUntil([&] { return entries == 1; });  // the resync after the reconnect read it
}

TEST_F(ReconnectTest, GivesUpAtTheDeadlineWithAnErrorNamingTheServer) {
  std::string gave_up;
  client_->SetReconnect(600, 0, nullptr, nullptr);
  client_->SetDisconnectCallback([&](const Status& s) { gave_up = s.message(); });
  redis_->KillHard();
  RunUntil([&] { return client_->reconnecting(); });
  std::optional<Status> kept;
  client_->Command({"PING"}, [&](Result<RedisReply> r) { kept = r.status(); });
  auto t0 = std::chrono::steady_clock::now();
  RunUntil([&] { return kept.has_value() && !gave_up.empty(); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(kept->code(), StatusCode::kUnavailable);
  EXPECT_NE(kept->message().find("redis-server (GCS) at 127.0.0.1:" + std::to_string(redis_->port())), std::string::npos)
      << kept->message();
  EXPECT_NE(gave_up.find("reconnect deadline"), std::string::npos) << gave_up;
  // Later commands fail at once.
  std::optional<Status> late;
  client_->Command({"PING"}, [&](Result<RedisReply> r) { late = r.status(); });
  RunUntil([&] { return late.has_value(); });
  EXPECT_FALSE(late->ok());
}

TEST_F(ReconnectTest, WithoutADeadlineALossIsFinalAtOnce) {
  std::string gave_up;
  client_->SetDisconnectCallback([&](const Status& s) { gave_up = s.message(); });
  redis_->KillHard();
  RunUntil([&] { return !gave_up.empty(); });
  EXPECT_FALSE(client_->reconnecting());
}

TEST(ParseRedisEndpoints, PrimaryAndReplicas) {
  auto e = ParseRedisEndpoints("10.0.0.1:6379,redis-b:7000");
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e.value().size(), 2u);
  EXPECT_EQ(e.value()[1].host, "redis-b");
  EXPECT_EQ(e.value()[1].port, 7000);
  EXPECT_FALSE(ParseRedisEndpoints("nohost").ok());
  EXPECT_FALSE(ParseRedisEndpoints("a:1,").ok());
  EXPECT_FALSE(ParseRedisEndpoints("a:99999").ok());
  EXPECT_FALSE(ParseRedisEndpoints("a:x").ok());
}

// ---- ClusterView liveness ----

rpc::NodeInfo Node(const std::string& id) {
  rpc::NodeInfo n;
  n.set_node_id(id);
  n.set_alive(true);
  (*n.mutable_resources_total())["CPU"] = 1;
  (*n.mutable_resources_available())["CPU"] = 1;
  return n;
}

TEST(ClusterViewLiveness, SilentOnlyAfterTheBeatStopsChangingForTheTimeout) {
  scheduler::ClusterView v("self", 1500);
  std::vector<rpc::NodeInfo> nodes = {Node("a")};
  v.Update(nodes, {{ToHex("a"), "1:0"}}, 0);
  EXPECT_NE(v.Find("a"), nullptr);
  v.Update(nodes, {{ToHex("a"), "1:0"}}, 1400);
  EXPECT_NE(v.Find("a"), nullptr);
  v.Update(nodes, {{ToHex("a"), "1:0"}}, 1600);
  EXPECT_EQ(v.Find("a"), nullptr);
  ASSERT_EQ(v.Silent().size(), 1u);
}

TEST(ClusterViewLiveness, AReaderThatStalledSeesAChangeNotADeath) {
  scheduler::ClusterView v("self", 1500);
  std::vector<rpc::NodeInfo> nodes = {Node("a")};
  v.Update(nodes, {{ToHex("a"), "1:0"}}, 0);
  v.Update(nodes, {{ToHex("a"), "30:0"}}, 10000);  // this raylet's loop was stuck 10 s; the node beat meanwhile
  EXPECT_NE(v.Find("a"), nullptr);
  EXPECT_TRUE(v.Silent().empty());
}

TEST(ClusterViewLiveness, ReportedLatenessExtendsTheTimeoutUpToDouble) {
  scheduler::ClusterView v("self", 1500);
  std::vector<rpc::NodeInfo> nodes = {Node("a")};
  v.Update(nodes, {{ToHex("a"), "5:900"}}, 0);  // its timer fired up to 0.9 s late lately
  v.Update(nodes, {{ToHex("a"), "5:900"}}, 2300);
  EXPECT_NE(v.Find("a"), nullptr);
  v.Update(nodes, {{ToHex("a"), "5:900"}}, 2500);
  EXPECT_EQ(v.Find("a"), nullptr);
  scheduler::ClusterView w("self", 1500);
  w.Update(nodes, {{ToHex("a"), "5:99999"}}, 0);
  w.Update(nodes, {{ToHex("a"), "5:99999"}}, 3100);  // (capped at the timeout again)
  EXPECT_EQ(w.Find("a"), nullptr);
}

TEST(ClusterViewLiveness, ForgiveRestartsEveryCountAfterTheGcsWasAway) {
  scheduler::ClusterView v("self", 1500);
  std::vector<rpc::NodeInfo> nodes = {Node("a"), Node("b")};
  v.Update(nodes, {{ToHex("a"), "1:0"}, {ToHex("b"), "1:0"}}, 0);
  v.Forgive(5000);  // the GCS was away 5 s: nobody could beat
  v.Update(nodes, {{ToHex("a"), "1:0"}, {ToHex("b"), "2:0"}}, 5200);
  EXPECT_NE(v.Find("a"), nullptr);
  EXPECT_NE(v.Find("b"), nullptr);
  v.Update(nodes, {{ToHex("a"), "1:0"}, {ToHex("b"), "3:0"}}, 6600);
  EXPECT_EQ(v.Find("a"), nullptr);  // and then a dead one is still found dead
  EXPECT_NE(v.Find("b"), nullptr);
}

TEST(ClusterViewLiveness, ASuspectComesBackWithItsNextBeat) {
  scheduler::ClusterView v("self", 1500);
  std::vector<rpc::NodeInfo> nodes = {Node("a")};
  v.Update(nodes, {{ToHex("a"), "1:0"}}, 0);
  v.Suspect("a");
  EXPECT_EQ(v.Find("a"), nullptr);
  v.Update(nodes, {{ToHex("a"), "1:0"}}, 100);
  EXPECT_EQ(v.Find("a"), nullptr);
  v.Update(nodes, {{ToHex("a"), "2:0"}}, 300);
  EXPECT_NE(v.Find("a"), nullptr);
}

TEST(ClusterViewLiveness, ANodeWithoutAHeartbeatEntryIsJudgedByItsNodeInfo) {
  scheduler::ClusterView v("self", 1500);
  auto a = Node("a");
  a.set_heartbeat_ms(100);
  v.Update({a}, {}, 0);
  a.set_heartbeat_ms(1100);
  v.Update({a}, {}, 1000);
  v.Update({a}, {}, 2400);
  EXPECT_NE(v.Find("a"), nullptr);
  v.Update({a}, {}, 2600);
  EXPECT_EQ(v.Find("a"), nullptr);
}

}  // namespace
}  // namespace phalanx
