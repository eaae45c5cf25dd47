// ObjectTransfer over an in-memory Transport (objectstore/transport.h): the
// nodes are ObjectTransfers in one process, a request is answered by the
// serving node's Serve on the next turn of the loop. The transport can lose
// a node, hold replies back, or damage them, so the transfer's recovery is
// tested without sockets (object_transfer_test.cc runs the same transfers
// over TCP).
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "core/frame.h"
#include "core/ids.h"
#include "core/trace.h"
#include "memory_network.h"
#include "objectstore/object_transfer.h"
#include "fake_directory.h"

namespace phalanx::objectstore {
namespace {

namespace asio = boost::asio;

class MemoryTransferTest : public ::testing::Test {
 protected:
  struct Node {
    explicit Node(const std::string& name) {
      auto region = ShmRegion::Create(32 << 20, ("memory-" + name).c_str());
      EXPECT_TRUE(region.ok());
      store = std::make_unique<ObjectStore>(std::move(region).value());
      table = std::make_unique<ObjectTable>(store.get());
    }
    std::unique_ptr<ObjectStore> store;
    std::unique_ptr<ObjectTable> table;
    std::unique_ptr<ObjectTransfer> transfer;
  };

  Node& Add(const std::string& name, ObjectDirectory* dir = nullptr) {
    auto n = std::make_unique<Node>(name);
    TransferOptions o;
    o.chunk_bytes = 256 << 10;
    o.window = 3;
    n->transfer = std::make_unique<ObjectTransfer>(n->table.get(), n->store.get(),
                                                   std::make_unique<MemoryNetwork::Endpoint>(&net_), o,
                                                   dir, name);
    net_.Join(name, n->transfer.get());
    Node& ref = *n;
    nodes_[name] = std::move(n);
    return ref;
  }
  void Put(Node& n, const std::string& id, uint64_t size) {
    n.table->AddRef(id);
    auto off = n.table->CreateInStore(id, size, {});
    ASSERT_TRUE(off.ok());
    for (uint64_t i = 0; i < size; ++i) n.store->base()[off.value() + i] = static_cast<uint8_t>(i * 31 + 5);
    ASSERT_TRUE(n.table->SealInStore(id).ok());
  }
  rpc::ObjectValue Value(Node& n, const std::string& id) {
    rpc::ObjectValue v;
    n.table->Describe(id, &v, false);
    return v;
  }
  void ExpectCopy(Node& n, const std::string& id, uint64_t size) {
    rpc::ObjectValue v = Value(n, id);
    ASSERT_EQ(v.state(), rpc::OBJ_IN_STORE) << v.error();
    ASSERT_EQ(v.size(), size);
    const uint8_t* b = n.store->base() + v.offset();
    for (uint64_t i = 0; i < size; ++i) ASSERT_EQ(b[i], static_cast<uint8_t>(i * 31 + 5)) << "byte " << i;
  }
  bool Settled(Node& n, const std::string& id) {
    rpc::ObjectValue v = Value(n, id);
    return v.state() == rpc::OBJ_IN_STORE || v.state() == rpc::OBJ_LOST;
  }
  void Run(const std::function<bool()>& until) { RunUntil(io_, until); }
  // `to` pulls 2 MiB (8 ranges) of id_ from `from`, which answers `ranges`
  // of them, then nothing more; returns once it has answered them.
  void StalledPull(Node& to, Node& from, const std::string& from_name, int ranges) {
    Put(from, id_, 2 << 20);
    net_.StallAfter(from_name, ranges);
    to.table->AddRef(id_);
    to.transfer->Pull(id_, from_name);
    Run([&] { return net_.served(from_name) >= ranges; });
  }

  asio::io_context io_;
  MemoryNetwork net_{io_};
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  const std::string id_ = std::string(20, 'm');
};

TEST_F(MemoryTransferTest, AnObjectArrivesWholeRangeByRange) {
  Node& a = Add("a");
  Node& b = Add("b");
  const uint64_t size = (2 << 20) + 777;  // 9 ranges, the last one short
  Put(b, id_, size);
  a.table->AddRef(id_);
  a.transfer->Pull(id_, "b");
  Run([&] { return Settled(a, id_); });
  ExpectCopy(a, id_, size);
  EXPECT_EQ(net_.served("b"), 9);
  EXPECT_TRUE(a.transfer->IsCopy(id_));
  EXPECT_EQ(a.transfer->num_pulling(), 0u);
}

TEST_F(MemoryTransferTest, ANodeStillReceivingServesTheRangesItHas) {
  Node& a = Add("a");
  Node& b = Add("b");
  Node& c = Add("c");
  StalledPull(b, a, "a", 3);  // a answers three ranges of eight, then nothing more
  Run([&] { return net_.served("a") >= 4; });
  c.table->AddRef(id_);
  c.transfer->Pull(id_, "b");  // c reads from b, which has three ranges of eight
  Run([&] { return net_.served("b") >= 3; });
  EXPECT_EQ(net_.served("b"), 3) << "b served the ranges it had, and holds the rest of c's requests";
  EXPECT_FALSE(b.table->IsReady(id_));
  EXPECT_FALSE(c.table->IsReady(id_));
}

TEST_F(MemoryTransferTest, ACopyInFlightIsInTheTimelineWithTheBytesHereSoFar) {
  // (the timeline's records need this process's ring open: tracing on)
  char tmpl[] = "/tmp/phalanx-transfer-trace.XXXXXX";
  std::string session = ::mkdtemp(tmpl);
  trace::OpenProcessRing(session, std::string(16, 'a'), "raylet");
  ASSERT_NE(trace::ProcessRing(), nullptr);
  Node& a = Add("a");
  Node& b = Add("b");
  const uint64_t size = 2 << 20;
  StalledPull(a, b, "b", 3);  // b answers three ranges of eight, then nothing more
  std::string live;
  a.transfer->TraceInFlight(&live, 10);
  ASSERT_EQ(live.size(), sizeof(trace::Record));
  trace::Record r;
  std::memcpy(static_cast<void*>(&r), live.data(), sizeof(r));
  EXPECT_EQ(r.kind, trace::kTransfer);
  EXPECT_EQ(r.flags, trace::kInFlight);
  EXPECT_EQ(std::string(r.id, 20), id_);
  EXPECT_EQ(std::string(r.peer, 1), "b");
  EXPECT_EQ(r.a, size);
  EXPECT_EQ(r.b, 3u * (256 << 10)) << "the bytes here so far";
  EXPECT_GT(r.ts_ns + r.dur_ns, trace::NowNs() - 10'000'000'000ull);
  std::string none;
  b.transfer->TraceInFlight(&none, 10);
  EXPECT_TRUE(none.empty()) << "b is the source: nothing copied to it";
  a.transfer->TraceInFlight(&none, 0);
  EXPECT_TRUE(none.empty()) << "at most max records";
  trace::CloseProcessRing();
  std::system(("rm -rf " + session + " " + trace::TraceDir(session)).c_str());
}

TEST_F(MemoryTransferTest, ALostNodeIsReplacedByTheDirectorysNextCopy) {
  FakeDirectory dir;
  dir.pick = [](const std::string&, const std::string&, bool, bool, const std::vector<std::string>& exclude,
                std::function<void(Result<std::string>)> cb) { cb(std::string(exclude.empty() ? "b" : "d")); };
  Node& b = Add("b");
  Node& d = Add("d");
  Node& a = Add("a", &dir);
  const uint64_t size = 2 << 20;
  Put(b, id_, size);
  Put(d, id_, size);
  net_.StallAfter("b", 4);
  a.table->AddRef(id_);
  a.transfer->Pull(id_, "");
  Run([&] { return net_.served("b") >= 5; });
  net_.Kill("b");  // its node dies with requests outstanding
  Run([&] { return Settled(a, id_); });
  ExpectCopy(a, id_, size);
  EXPECT_LE(net_.served("d"), 8 - 4 + 3) << "d sends what a lacks, not the whole object again";
}

TEST_F(MemoryTransferTest, AShortReplyLosesTheCopyNamingTheNode) {
  Node& a = Add("a");
  Node& b = Add("b");
  Put(b, id_, 1 << 20);
  net_.TruncateAfter("b", 1);
  a.table->AddRef(id_);
  a.transfer->Pull(id_, "b");
  Run([&] { return Settled(a, id_); });
  rpc::ObjectValue v = Value(a, id_);
  ASSERT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("node " + ToHex("b")), std::string::npos) << v.error();
  EXPECT_NE(v.error().find("short range"), std::string::npos) << v.error();
  EXPECT_EQ(a.store->Find(id_), nullptr) << "the partial copy's space is freed";
}

TEST_F(MemoryTransferTest, AnObjectNoNodeHasIsLostWithTheReason) {
  Node& a = Add("a");
  Add("b");
  a.table->AddRef(id_);
  a.transfer->Pull(id_, "nowhere");
  Run([&] { return Settled(a, id_); });
  rpc::ObjectValue v = Value(a, id_);
  ASSERT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("gone"), std::string::npos) << v.error();
}

TEST_F(MemoryTransferTest, ATransferWithoutATransportOnlyServes) {
  auto region = ShmRegion::Create(1 << 20, "memory-alone");
  ASSERT_TRUE(region.ok());
  ObjectStore store(std::move(region).value());
  ObjectTable table(&store);
  ObjectTransfer alone(&table, &store, nullptr);
  table.AddRef(id_);
  alone.Pull(id_, "b");
  rpc::ObjectValue v;
  table.Describe(id_, &v, false);
  ASSERT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("no transport"), std::string::npos) << v.error();
}

}  // namespace
}  // namespace phalanx::objectstore
