// Rendezvous (scheduler/rendezvous.h) against a real redis-server: two
// raylets' worth of GCS clients, ranks meeting on either.
#include "scheduler/rendezvous.h"

#include <gtest/gtest.h>

#include "tests/cpp/test_util.h"

namespace phalanx::scheduler {

class RendezvousTest : public ::testing::Test {
 protected:
  struct Side {
    std::unique_ptr<RedisClient> redis;
    std::unique_ptr<GcsClient> gcs;
    std::unique_ptr<Rendezvous> rdv;
  };
  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>();
    for (auto& s : sides_) {
      s.redis = std::make_unique<RedisClient>(io_, "127.0.0.1", redis_->port());
      ASSERT_TRUE(s.redis->Connect(2000).ok());
      s.gcs = std::make_unique<GcsClient>(s.redis.get());
      s.rdv = std::make_unique<Rendezvous>(io_, s.gcs.get());
    }
  }
  rpc::Rendezvous Arrival(const std::string& key, int rank, int world, const std::string& payload,
                          int64_t timeout_ms = -1) {
    rpc::Rendezvous m;
    m.set_key(key);
    m.set_rank(rank);
    m.set_world(world);
    m.set_payload(payload);
    m.set_timeout_ms(timeout_ms);
    return m;
  }
  void RunUntil(const std::function<bool()>& done, int ms = 5000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!done() && std::chrono::steady_clock::now() < until) io_.run_for(std::chrono::milliseconds(5));
  }
  // The ranks still listed at `key` in the GCS.
  std::vector<std::string> Listed(const std::string& key) {
    std::vector<std::string> out;
    bool got = false;
    sides_[0].redis->Command({"HKEYS", "rdv:" + key}, [&](Result<RedisReply> r) {
      for (const auto& e : r.value().elements) out.push_back(e.str);
      got = true;
    });
    RunUntil([&] { return got; });
    return out;
  }
  boost::asio::io_context io_;
  std::unique_ptr<testing::RedisServer> redis_;
  Side sides_[2];
};

TEST_F(RendezvousTest, EveryRankGetsEveryPayloadOnceAllHaveArrived) {
  std::vector<Result<std::vector<std::string>>> got(3, Status::Internal("not yet"));
  int done = 0;
  auto on = [&](int rank) {
    return [&, rank](Result<std::vector<std::string>> r) {
      got[rank] = std::move(r);
      ++done;
    };
  };
  // Binary payloads, with the record's separators in them.
  const std::string p0("a:1:\0b", 6), p1 = "", p2(300, ':');
  sides_[0].rdv->Arrive(Arrival("g:1", 2, 3, p2), on(2));
  sides_[1].rdv->Arrive(Arrival("g:1", 0, 3, p0), on(0));
  RunUntil([&] { return done > 0; }, 300);
  EXPECT_EQ(done, 0);  // two of three: nobody is through
  EXPECT_EQ(Listed("g:1").size(), 2u);
  sides_[0].rdv->Arrive(Arrival("g:1", 1, 3, p1), on(1));
  RunUntil([&] { return done == 3; });
  ASSERT_EQ(done, 3);
  for (const auto& r : got) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.value(), (std::vector<std::string>{p0, p1, p2}));
  }
  EXPECT_TRUE(Listed("g:1").empty());  // the GCS forgets a complete rendezvous
  EXPECT_EQ(sides_[0].rdv->num_waiting() + sides_[1].rdv->num_waiting(), 0u);
}

TEST_F(RendezvousTest, ARankThatGivesUpNamesTheMissingAndTakesItsArrivalBack) {
  Status st;
  bool done = false;
  sides_[0].rdv->Arrive(Arrival("g:2", 1, 3, "x", 200), [&](Result<std::vector<std::string>> r) {
    st = r.status();
    done = true;
  });
  sides_[1].rdv->Arrive(Arrival("g:2", 0, 3, "y"), [](Result<std::vector<std::string>>) {});
  RunUntil([&] { return done; });
  ASSERT_TRUE(done);
  EXPECT_EQ(st.code(), StatusCode::kTimedOut);
  EXPECT_NE(st.message().find("2 of 3 did; missing rank 2"), std::string::npos) << st.message();
  EXPECT_EQ(Listed("g:2"), std::vector<std::string>{"0"});  // rank 1 is no longer counted
}

TEST_F(RendezvousTest, TheDeathOfARanksNodeFailsTheWait) {
  Status st;
  bool done = false;
  rpc::Rendezvous m = Arrival("g:3", 0, 2, "x");
  m.add_rank_nodes("node-a");
  m.add_rank_nodes("node-b");
  sides_[0].rdv->Arrive(m, [&](Result<std::vector<std::string>> r) {
    st = r.status();
    done = true;
  });
  RunUntil([&] { return !Listed("g:3").empty(); });
  sides_[0].rdv->NodeDied("node-c");  // no rank there
  io_.run_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done);
  sides_[0].rdv->NodeDied("node-b");
  RunUntil([&] { return done; });
  EXPECT_EQ(st.code(), StatusCode::kCollectiveFailed);
  EXPECT_NE(st.message().find("the node of rank 1"), std::string::npos) << st.message();
  EXPECT_TRUE(Listed("g:3").empty());
}

TEST_F(RendezvousTest, TheExitOfARanksProcessFailsTheWaitOnEveryRaylet) {
  auto arrival = [&](int rank) {
    rpc::Rendezvous m = Arrival("g:5", rank, 3, "x");
    for (const char* c : {"client-a", "client-b", "client-c"}) m.add_rank_clients(c);
    return m;
  };
  std::vector<Status> st(2, Status::Internal("not yet"));
  int done = 0;
  for (int rank : {0, 1}) {
    sides_[rank].rdv->Arrive(arrival(rank), [&, rank](Result<std::vector<std::string>> r) {
      st[rank] = r.status();
      ++done;
    });
  }
  RunUntil([&] { return Listed("g:5").size() == 2; });
  sides_[1].rdv->ClientGone("client-z", "not a rank");
  io_.run_for(std::chrono::milliseconds(100));
  EXPECT_EQ(done, 0);
  // Rank 2's process exits on side 1's node: both sides' waits fail, no timeout set.
  sides_[1].rdv->ClientGone("client-c", "worker process 7 on node n exited");
  RunUntil([&] { return done == 2; });
  ASSERT_EQ(done, 2);
  for (const auto& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kCollectiveFailed);
    EXPECT_EQ(s.message(), "rank 2 is gone: worker process 7 on node n exited");
  }
  EXPECT_TRUE(Listed("g:5").empty());
  // A later arrival counting on it fails at once, and is not counted.
  Status later;
  bool came = false;
  sides_[0].rdv->Arrive(arrival(0), [&](Result<std::vector<std::string>> r) {
    later = r.status();
    came = true;
  });
  RunUntil([&] { return came; });
  EXPECT_EQ(later.code(), StatusCode::kCollectiveFailed);
  EXPECT_EQ(later.message(), "rank 2 is gone: worker process 7 on node n exited");
  EXPECT_TRUE(Listed("g:5").empty());
  EXPECT_EQ(sides_[0].rdv->num_waiting() + sides_[1].rdv->num_waiting(), 0u);
}

// A rendezvous completes twice on the channel: once as the reply to its last
// arrival, once as the message published. A new round at the same key, begun
// as soon as the reply came, must not take the old round's message for its
// own (it got an earlier round's payloads: an init_group after a failed one
// saw the failed one's backend).
TEST_F(RendezvousTest, ANewRoundAtTheSameKeyIsNotCompletedByTheLastRoundsRecord) {
  constexpr int kRounds = 40;
  std::vector<std::string> got;
  std::function<void(int)> round = [&](int i) {
    sides_[0].rdv->Arrive(Arrival("g:6", 0, 1, "round " + std::to_string(i)),
                          [&, i](Result<std::vector<std::string>> r) {
                            got.push_back(r.ok() ? r.value().at(0) : r.status().ToString());
                            if (i + 1 < kRounds) round(i + 1);
                          });
  };
  round(0);
  RunUntil([&] { return got.size() == kRounds; });
  ASSERT_EQ(got.size(), static_cast<size_t>(kRounds));
  for (int i = 0; i < kRounds; ++i) EXPECT_EQ(got[i], "round " + std::to_string(i));
  EXPECT_EQ(sides_[0].rdv->num_waiting(), 0u);
}

TEST_F(RendezvousTest, ABadRankIsRefusedAtOnce) {
  Status st;
  sides_[0].rdv->Arrive(Arrival("g:4", 3, 3, ""), [&](Result<std::vector<std::string>> r) { st = r.status(); });
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

}  // namespace phalanx::scheduler
