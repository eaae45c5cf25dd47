// The HeartbeatThread against a real redis-server: it writes "seq:late_ms"
// to the heartbeats hash with a growing seq, stops beating while the main
// loop is silent past stall_ms and beats again once it turns, and beats
// again by itself after redis-server comes back.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/ids.h"
#include "gcs/gcs_tables.h"
#include "gcs/redis_client.h"
#include "scheduler/heartbeat.h"
#include "tests/cpp/test_util.h"

namespace phalanx::scheduler {
namespace {

constexpr char kNode[] = "0123456789abcdef";  // 16 bytes, a node id

// The seq of the node's last beat in the GCS, or -1 (none, or no server).
int64_t SeqInGcs(int port) {
  auto c = RedisConnection::Open("127.0.0.1", port, "", nullptr, 1000);
  if (!c.ok()) return -1;
  auto r = c.value()->Command({"HGET", gcs_tables::kHeartbeats, ToHex(kNode)});
  if (!r.ok() || r.value().type != RedisReply::kString) return -1;
  return std::stoll(r.value().str.substr(0, r.value().str.find(':')));
}

// Waits (up to 10 s) until `pred` holds.
template <typename Pred>
bool Eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

HeartbeatOptions Options(int port, int64_t stall_ms = 60000) {
  HeartbeatOptions o;
  o.endpoints = {RedisEndpoint{"127.0.0.1", port}};
  o.node_id = kNode;
  o.interval_ms = 50;
  o.stall_ms = stall_ms;
  return o;
}

TEST(HeartbeatTest, BeatsReachTheGcsWithAGrowingSequence) {
  testing::RedisServer redis;
  HeartbeatThread beat(Options(redis.port()));
  beat.MainLoopAlive();
  beat.Start();
  ASSERT_TRUE(Eventually([&] { return SeqInGcs(redis.port()) >= 1; }));
  int64_t first = SeqInGcs(redis.port());
  ASSERT_TRUE(Eventually([&] { return SeqInGcs(redis.port()) >= first + 3; }));
  EXPECT_GE(beat.beats(), 4u);
  beat.Stop();
  int64_t last = SeqInGcs(redis.port());
  beat.Stop();  // (idempotent)
  EXPECT_EQ(SeqInGcs(redis.port()), last);  // no beat after Stop
}

TEST(HeartbeatTest, ASilentMainLoopStopsTheBeatUntilItTurnsAgain) {
  testing::RedisServer redis;
  HeartbeatThread beat(Options(redis.port(), /*stall_ms=*/300));
  beat.MainLoopAlive();
  beat.Start();
  ASSERT_TRUE(Eventually([&] { return beat.beats() >= 2; }));
  // The main loop says nothing from now on: the beats stop within stall_ms and an interval or two.
  ASSERT_TRUE(Eventually([&] {
    uint64_t before = beat.beats();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // (four intervals)
    return beat.beats() == before;
  }));
  int64_t frozen = SeqInGcs(redis.port());
  beat.MainLoopAlive();  // turning again
  EXPECT_TRUE(Eventually([&] { return SeqInGcs(redis.port()) > frozen; }));
}

TEST(HeartbeatTest, BeatsAgainAfterRedisServerComesBack) {
  testing::RedisServer redis;
  HeartbeatThread beat(Options(redis.port()));
  beat.MainLoopAlive();
  beat.Start();
  ASSERT_TRUE(Eventually([&] { return SeqInGcs(redis.port()) >= 1; }));
  redis.KillHard();
  uint64_t during = beat.beats();
  redis.Start();  // (the same port, an empty hash)
  EXPECT_TRUE(Eventually([&] {
    beat.MainLoopAlive();
    return SeqInGcs(redis.port()) >= 1 && beat.beats() > during;
  }));
}

}  // namespace
}  // namespace phalanx::scheduler
