// GroupCollectives over real GroupChannels (worker/group_channel.h): each
// rank a thread with its own channel, on loopback TCP or Unix sockets with
// the cluster-token handshake. Every op at sizes on both sides of each
// algorithm's switch, worlds 1-5; a mismatch, a rank that leaves, a rank
// that never comes and a stranger's connection each end in a named error.
#include "collectives/group_collectives.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/ids.h"
#include "worker/group_channel.h"

namespace phalanx {
namespace {

using collectives::DType;
using collectives::GroupCall;
using collectives::GroupCollectives;
using collectives::ReduceOp;

const char kToken[] = "group-test-token";

// `world` channels of one forming, connected to each other (ranks on
// "node-a" and "node-b" alternately when `two_nodes`: those reach each other
// by TCP, the others by Unix sockets).
std::vector<std::unique_ptr<GroupChannel>> Form(int world, bool two_nodes = false, const std::string& group = "g",
                                                bool tls = false) {
  static int folder_n = 0;
  std::string dir = "/tmp/group_test_" + std::to_string(::getpid()) + "_" + std::to_string(folder_n++);
  (void)std::system(("mkdir -p " + dir).c_str());
  std::vector<std::unique_ptr<GroupChannel>> chs;
  std::vector<GroupChannel::Peer> peers;
  for (int r = 0; r < world; ++r) {
    GroupChannel::Options o;
    o.token = kToken;
    if (tls) o.tls = TlsContext::Create(kToken).value();
    o.node_id = two_nodes && r % 2 ? "node-b" : "node-a";
    o.node_address = "127.0.0.1";
    o.session_dir = dir;
    o.group = group;
    o.rank = r;
    o.world = world;
    auto ch = GroupChannel::Open(o);
    EXPECT_TRUE(ch.ok()) << ch.status().message();
    peers.push_back({o.node_id, ch.value()->addresses(), "rank " + std::to_string(r) + " (test)"});
    chs.push_back(std::move(ch.value()));
  }
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r) {
    ts.emplace_back([&, r] {
      Status st = chs[r]->Connect(peers, "nonce-1", 5000);
      EXPECT_TRUE(st.ok()) << st.message();
    });
  }
  for (auto& t : ts) t.join();
  // Ranks on one node reach each other through shared memory.
  for (int r = 0; r < world; ++r) {
    int same_node = 0;
    for (int q = 0; q < world; ++q) same_node += q != r && peers[q].node_id == peers[r].node_id ? 1 : 0;
    EXPECT_EQ(chs[r]->shared_memory_links(), same_node) << "rank " << r;
  }
  return chs;
}

// Runs fn(rank, collectives) on every rank at once; their statuses by rank.
std::vector<Status> OnEveryRank(std::vector<std::unique_ptr<GroupChannel>>& chs,
                                const std::function<Status(int, GroupCollectives&)>& fn) {
  std::vector<Status> out(chs.size());
  std::vector<std::thread> ts;
  for (size_t r = 0; r < chs.size(); ++r) {
    ts.emplace_back([&, r] {
      GroupCollectives c(chs[r].get());
      out[r] = fn(static_cast<int>(r), c);
    });
  }
  for (auto& t : ts) t.join();
  return out;
}

GroupCall Call(uint64_t id, const std::string& what, int ms = 10000) {
  GroupCall c;
  c.id = id;
  c.what = what;
  c.deadline = DeadlineAfterMs(ms);
  return c;
}

TEST(GroupCollectivesTest, AllreduceAtEverySizeAndWorld) {
  for (int world = 1; world <= 5; ++world) {
    auto chs = Form(world, world >= 3);
    uint64_t id = 0;
    // 0, 1, under the ring's switch, 1 KiB - 1, fewer than world, and ring sizes with a ragged end.
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{255}, size_t{16383}, size_t{16384 * 3 + 3},
                         size_t{(1 << 20) + 3}}) {
      std::vector<std::vector<float>> data(world);
      for (int r = 0; r < world; ++r) {
        data[r].resize(count);
        for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>((i % 97) * (r + 1));
      }
      ++id;
      auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
        return c.Allreduce(Call(id, "allreduce " + std::to_string(count)), data[r].data(), count, DType::kFloat32,
                           ReduceOp::kSum);
      });
      const float factor = static_cast<float>(world * (world + 1) / 2);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(st[r].ok()) << "world " << world << " count " << count << ": " << st[r].message();
        for (size_t i = 0; i < count; i += 1 + count / 50) {
          ASSERT_EQ(data[r][i], static_cast<float>(i % 97) * factor) << "world " << world << " count " << count;
        }
        if (count > 0) ASSERT_EQ(data[r][count - 1], static_cast<float>((count - 1) % 97) * factor);
        ASSERT_EQ(std::memcmp(data[r].data(), data[0].data(), count * 4), 0) << "the same bits on every rank";
      }
    }
  }
}

TEST(GroupCollectivesTest, UnderTlsTwoRanksRing) {
  auto chs = Form(2, true, "tls2", /*tls=*/true);
  std::vector<std::vector<float>> data(2, std::vector<float>(1 << 20, 1.0f));
  auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
    return c.Allreduce(Call(1, "tls"), data[r].data(), 1 << 20, DType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(st[r].ok()) << r << ": " << st[r].message();
}

TEST(GroupCollectivesTest, UnderTls) {
  auto chs = Form(3, true, "tls", /*tls=*/true);
  for (size_t count : {size_t{100}, size_t{(1 << 20) + 5}}) {
    std::vector<std::vector<float>> data(3, std::vector<float>(count, 1.0f));
    auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
      return c.Allreduce(Call(count, "tls"), data[r].data(), count, DType::kFloat32, ReduceOp::kSum);
    });
    for (int r = 0; r < 3; ++r) EXPECT_TRUE(st[r].ok()) << "count " << count << " rank " << r << ": " << st[r].message();
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(st[r].ok());
      ASSERT_EQ(data[r][count - 1], 3.0f);
    }
  }
}

TEST(GroupCollectivesTest, MaxOfInt64) {
  auto chs = Form(3);
  std::vector<std::vector<int64_t>> data(3, std::vector<int64_t>(100000));
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 0; i < data[r].size(); ++i) data[r][i] = static_cast<int64_t>(i) * (r == 1 ? 5 : 1) - r;
  }
  auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
    return c.Allreduce(Call(1, "max"), data[r].data(), data[r].size(), DType::kInt64, ReduceOp::kMax);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    EXPECT_EQ(data[r][0], 0);
    EXPECT_EQ(data[r][99999], 99999 * 5 - 1);
  }
}

TEST(GroupCollectivesTest, BroadcastFromAnyRootBothWays) {
  for (int world : {1, 2, 3, 5}) {
    auto chs = Form(world, true);
    uint64_t id = 0;
    for (size_t n : {size_t{0}, size_t{1}, size_t{1023}, size_t{(64 << 20) + 12}}) {
      for (int root : {0, world - 1}) {
        std::vector<std::string> data(world, std::string(n, 'x'));
        for (size_t i = 0; i < n; i += 4099) data[root][i] = static_cast<char>('a' + i % 26);
        if (n > 0) data[root][n - 1] = 'z';
        ++id;
        auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
          return c.Broadcast(Call(id, "bcast"), data[r].data(), n, root);
        });
        for (int r = 0; r < world; ++r) {
          ASSERT_TRUE(st[r].ok()) << st[r].message();
          ASSERT_TRUE(data[r] == data[root]) << "world " << world << " n " << n << " root " << root << " rank " << r;
        }
      }
    }
  }
}

TEST(GroupCollectivesTest, AllgatherReduceScatterBarrierAndPointToPoint) {
  const int world = 4;
  auto chs = Form(world, true);
  const size_t block = 300001;
  std::vector<std::string> out(world, std::string(block * world, '\0'));
  for (int r = 0; r < world; ++r) std::fill_n(out[r].data() + r * block, block, static_cast<char>('A' + r));
  auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) { return c.Allgather(Call(1, "ag"), out[r].data(), block); });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    for (int k = 0; k < world; ++k) ASSERT_EQ(out[r][k * block + block / 2], 'A' + k);
  }
  // Uneven parts, one of them empty.
  std::vector<size_t> cuts = {0, 5, 5, 200000, 200003};
  std::vector<std::vector<double>> rs(world, std::vector<double>(200003));
  for (int r = 0; r < world; ++r) std::iota(rs[r].begin(), rs[r].end(), static_cast<double>(r));
  st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
    return c.ReduceScatter(Call(2, "rs"), rs[r].data(), DType::kFloat64, ReduceOp::kSum, cuts);
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    for (size_t i = cuts[r]; i < cuts[r + 1]; ++i) ASSERT_EQ(rs[r][i], 4.0 * i + 6) << "rank " << r << " i " << i;
  }
  st = OnEveryRank(chs, [&](int, GroupCollectives& c) { return c.Barrier(Call(3, "barrier")); });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.message();
  std::string msg(3 << 20, 'm'), got(3 << 20, '\0');
  st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
    if (r == 1) return c.Send(Call(4, "p2p"), 3, msg.data(), msg.size());
    if (r == 3) return c.Recv(Call(4, "p2p"), 1, got.data(), got.size());
    return Status::OK();
  });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(got == msg);
}

TEST(GroupCollectivesTest, AMismatchFailsEveryRankNamingBoth) {
  auto chs = Form(3);
  std::vector<std::vector<float>> data(3, std::vector<float>(100));
  auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
    size_t count = r == 2 ? 99 : 100;
    return c.Allreduce(Call(1, "allreduce sum float32 (" + std::to_string(count) + ",)"), data[r].data(), count,
                       DType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(st[r].code(), StatusCode::kCollectiveFailed) << r << ": " << st[r].message();
    EXPECT_NE(st[r].message().find("(99,)"), std::string::npos) << st[r].message();
    EXPECT_NE(st[r].message().find("(100,)"), std::string::npos) << st[r].message();
  }
  // The group goes on: the next call works.
  st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
    return c.Allreduce(Call(2, "again"), data[r].data(), 100, DType::kFloat32, ReduceOp::kSum);
  });
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.message();
}

TEST(GroupCollectivesTest, ARankThatLeavesOrNeverComesIsNamed) {
  auto chs = Form(4, true);
  std::vector<std::vector<float>> data(4, std::vector<float>(1 << 20));
  // Rank 3 leaves while the others are in a call: they fail at once, naming it.
  auto t0 = Clock::now();
  auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
    if (r == 3) {
      chs[3].reset();
      return Status::OK();
    }
    return c.Allreduce(Call(1, "ar", 60000), data[r].data(), data[r].size(), DType::kFloat32, ReduceOp::kSum);
  });
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(st[r].code(), StatusCode::kCollectiveFailed) << st[r].message();
    EXPECT_NE(st[r].message().find("rank 3 (test) is gone"), std::string::npos) << st[r].message();
  }
  // A rank that never calls: the others time out by their deadline, naming whom they waited for.
  auto chs2 = Form(3);
  st = OnEveryRank(chs2, [&](int r, GroupCollectives& c) {
    if (r == 2) return Status::OK();
    return c.Allreduce(Call(1, "ar", 300), data[r].data(), 10, DType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(st[r].code() == StatusCode::kTimedOut || st[r].code() == StatusCode::kCollectiveFailed)
        << st[r].message();
    EXPECT_NE(st[r].message().find("rank"), std::string::npos) << st[r].message();
  }
}

TEST(GroupCollectivesTest, AConnectionFromAnotherFormingIsRefused) {
  // Rank 1 of another forming (another nonce) cannot join rank 0 of this one.
  GroupChannel::Options o;
  o.token = kToken;
  o.node_id = "n";
  o.node_address = "127.0.0.1";
  o.group = "g";
  o.world = 2;
  auto zero = GroupChannel::Open(o);
  o.rank = 1;
  auto one = GroupChannel::Open(o);
  ASSERT_TRUE(zero.ok() && one.ok());
  std::vector<GroupChannel::Peer> peers = {{"n", zero.value()->addresses(), "rank 0"},
                                           {"n", one.value()->addresses(), "rank 1"}};
  std::thread t([&] { (void)one.value()->Connect(peers, "other-nonce", 2000); });
  Status st = zero.value()->Connect(peers, "this-nonce", 1000);
  t.join();
  EXPECT_EQ(st.code(), StatusCode::kTimedOut) << st.message();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace phalanx
namespace phalanx {
namespace {
TEST(GroupCollectivesTest, DISABLED_SmallAllreduceLatency) {
  for (int world : {2, 8}) {
    auto chs = Form(world, false);
    std::vector<std::vector<float>> data(world, std::vector<float>(256, 1.0f));
    const int calls = 2000;
    auto t0 = Clock::now();
    auto st = OnEveryRank(chs, [&](int r, GroupCollectives& c) {
      for (int i = 0; i < calls; ++i) {
        Status s = c.Allreduce(Call(i + 1, "lat"), data[r].data(), 256, DType::kFloat32, ReduceOp::kMax);
        if (!s.ok()) return s;
      }
      return Status::OK();
    });
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
    printf("world %d: %.1f us per 1 KiB allreduce\n", world, us);
  }
}
}  // namespace
}  // namespace phalanx
