// ObjectTransfer between two object tables (two "nodes" in one process) over
// real TCP on loopback: chunked copies, objects that are not ready yet,
// unknown objects, and a server that goes away mid-copy.
#include "objectstore/object_transfer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "core/ids.h"
#include "objectstore/tcp_transport.h"
#include "table_owner.h"
#include "fake_directory.h"

namespace phalanx::objectstore {

namespace asio = boost::asio;
const char kTestToken[] = "test-token";

// A TcpTransport whose connections (one per node, while open) go to the
// loopback port `port_of(node)` gives (0: no such node), as a raylet's
// PeerManager keeps one per peer.
std::unique_ptr<Transport> LoopbackTransport(asio::io_context& io, std::function<int(const std::string&)> port_of) {
  struct Cache {
    std::unordered_map<std::string, std::shared_ptr<RpcClient>> open;
    std::unordered_map<std::string, std::vector<std::function<void(Result<std::shared_ptr<RpcClient>>)>>> waiting;
  };
  auto cache = std::make_shared<Cache>();
  return std::make_unique<TcpTransport>(
      [&io, port_of, cache](const std::string& node, std::function<void(Result<std::shared_ptr<RpcClient>>)> done) {
        auto it = cache->open.find(node);
        if (it != cache->open.end() && !it->second->closed()) return done(it->second);
        int port = port_of(node);
        if (port == 0) return done(Status::Unavailable("no node " + node));
        auto& queue = cache->waiting[node];
        queue.push_back(std::move(done));
        if (queue.size() > 1) return;
        RpcClient::ConnectTcp(io, "127.0.0.1", port, 2000, kTestToken, nullptr,
                              [cache, node](Result<std::shared_ptr<RpcClient>> r) {
                                if (r.ok()) {
                                  r.value()->Start();
                                  cache->open[node] = r.value();
                                }
                                auto waiters = std::move(cache->waiting[node]);
                                cache->waiting.erase(node);
                                for (auto& w : waiters) w(r);
                              });
      });
}

struct Node {
  explicit Node(const char* name) {
    auto region = ShmRegion::Create(64 << 20, name);
    EXPECT_TRUE(region.ok());
    store = std::make_unique<ObjectStore>(std::move(region).value());
    table = std::make_unique<ObjectTable>(store.get(), &owner);
  }
  RecordingOwner owner;  // (declared first: the table tells it about frees as it goes)
  std::unique_ptr<ObjectStore> store;
  std::unique_ptr<ObjectTable> table;
};

// Serves PULL_OBJECT from `node` through its ObjectTransfer; can drop every
// connection on demand.
class PullServer {
 public:
  PullServer(asio::io_context& io, ObjectTransfer* transfer)
      : io_(io), transfer_(transfer), acceptor_(io, {asio::ip::make_address("127.0.0.1"), 0}) {
    Accept();
  }
  int port() const { return acceptor_.local_endpoint().port(); }
  int served = 0;
  int close_after = -1;  // closes every connection once this many ranges were served
  int stall_after = -1;  // holds replies back once this many ranges were served, until Release()
  void Release() {
    stall_after = -1;
    auto held = std::move(held_);
    held_.clear();
    for (auto& f : held) f();
  }

 private:
  void Accept() {
    acceptor_.async_accept([this](auto ec, asio::ip::tcp::socket s) {
      if (ec) return;
      FramedConnection::Socket g(io_);
      g.assign(asio::generic::stream_protocol(AF_INET, SOCK_STREAM), s.release());
      auto c = std::make_shared<FramedConnection>(std::move(g), "serving node");
      c->RequireAuth(Handshake::Role::kServer, kTestToken, "127.0.0.1");
      conns_.push_back(c);
      std::weak_ptr<FramedConnection> weak = c;
      c->Start(
          [this, weak](const FrameHeader& h, const char* body, size_t len) {
            rpc::PullObject m;
            ASSERT_TRUE(m.ParseFromArray(body, static_cast<int>(len)));
            const uint64_t req = h.request_id;
            transfer_->Serve(m, req, [this, weak](OutFrame frame) {
              auto send = [this, weak, frame = std::move(frame)] {
                auto c = weak.lock();
                if (!c) return;
                if (close_after >= 0 && served >= close_after) return c->Close();
                ++served;
                c->Send(frame);
              };
              if (stall_after >= 0 && served >= stall_after) return held_.push_back(send);
              send();
            });
          },
          [](const Status&) {});
      Accept();
    });
  }
  asio::io_context& io_;
  ObjectTransfer* transfer_;
  asio::ip::tcp::acceptor acceptor_;
  std::vector<std::shared_ptr<FramedConnection>> conns_;
  std::vector<std::function<void()>> held_;
};

class ObjectTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_transfer_ = std::make_unique<ObjectTransfer>(b_.table.get(), b_.store.get(), nullptr);
    server_ = std::make_unique<PullServer>(io_, server_transfer_.get());
    TransferOptions small_chunks;
    small_chunks.chunk_bytes = 1 << 20;
    small_chunks.window = 3;
    puller_ = std::make_unique<ObjectTransfer>(a_.table.get(), a_.store.get(),
                                               LoopbackTransport(io_,
                                                                 [this](const std::string& node) {
                                                                   EXPECT_EQ(node, "node-b");
                                                                   return server_->port();
                                                                 }),
                                               small_chunks);
  }
  void Run(const std::function<bool()>& until) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!until() && std::chrono::steady_clock::now() < deadline) io_.run_for(std::chrono::milliseconds(5));
  }
  static std::string Id(char c) { return std::string(20, c); }
  // Puts `size` patterned bytes for `id` into node b's store.
  void PutInB(const std::string& id, uint64_t size) {
    b_.table->AddRef(id);
    auto off = b_.table->CreateInStore(id, size, {});
    ASSERT_TRUE(off.ok());
    for (uint64_t i = 0; i < size; ++i) b_.store->base()[off.value() + i] = static_cast<uint8_t>(i * 7 + 3);
    ASSERT_TRUE(b_.table->SealInStore(id).ok());
  }
  rpc::ObjectValue ValueInA(const std::string& id) {
    rpc::ObjectValue v;
    a_.table->Describe(id, &v, false);
    return v;
  }

  asio::io_context io_;
  Node a_{"transfer-a"};
  Node b_{"transfer-b"};
  std::unique_ptr<ObjectTransfer> server_transfer_;
  std::unique_ptr<PullServer> server_;
  std::unique_ptr<ObjectTransfer> puller_;
};

TEST_F(ObjectTransferTest, StoreObjectArrivesWholeInChunks) {
  const uint64_t size = (5 << 20) + 12345;  // 6 ranges of 1 MiB, the last one short
  PutInB(Id('x'), size);
  a_.table->AddRef(Id('x'));
  puller_->Pull(Id('x'), "node-b");
  Run([&] { return a_.table->IsReady(Id('x')); });
  rpc::ObjectValue v = ValueInA(Id('x'));
  ASSERT_EQ(v.state(), rpc::OBJ_IN_STORE);
  ASSERT_EQ(v.size(), size);
  const uint8_t* p = a_.store->base() + v.offset();
  for (uint64_t i = 0; i < size; ++i) ASSERT_EQ(p[i], static_cast<uint8_t>(i * 7 + 3)) << "byte " << i;
  EXPECT_EQ(server_->served, 6);
  EXPECT_EQ(puller_->num_pulling(), 0u);
}

TEST_F(ObjectTransferTest, PullWaitsForAnObjectNotReadyThere) {
  b_.table->AddRef(Id('p'));  // pending on b: its task has not finished
  a_.table->AddRef(Id('p'));
  puller_->Pull(Id('p'), "node-b");
  io_.run_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(a_.table->IsReady(Id('p')));
  b_.table->PutInline(Id('p'), "late value", {});
  Run([&] { return a_.table->IsReady(Id('p')); });
  rpc::ObjectValue v = ValueInA(Id('p'));
  EXPECT_EQ(v.state(), rpc::OBJ_INLINE);
  EXPECT_EQ(v.data(), "late value");
}

TEST_F(ObjectTransferTest, UnknownObjectIsLostWithTheReason) {
  a_.table->AddRef(Id('u'));
  puller_->Pull(Id('u'), "node-b");
  Run([&] { return a_.table->IsReady(Id('u')); });
  rpc::ObjectValue v = ValueInA(Id('u'));
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("does not have it"), std::string::npos) << v.error();
}

TEST_F(ObjectTransferTest, ServerGoingAwayMidCopyLosesTheObjectNamingTheNode) {
  PutInB(Id('m'), 4 << 20);
  server_->close_after = 2;
  a_.table->AddRef(Id('m'));
  puller_->Pull(Id('m'), "node-b");
  Run([&] { return a_.table->IsReady(Id('m')); });
  rpc::ObjectValue v = ValueInA(Id('m'));
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find(phalanx::ToHex("node-b").substr(0, 12)), std::string::npos) << v.error();
  Run([&] { return puller_->num_pulling() == 0; });
  EXPECT_EQ(puller_->num_pulling(), 0u);
  EXPECT_EQ(a_.store->Stats().objects, 0u);  // the partial copy was dropped
}

// Several nodes, each with a table, a transfer and a server, found by name.
class TransferChainTest : public ::testing::Test {
 protected:
  struct Peer {
    explicit Peer(const std::string& name) : node(name.c_str()) {}
    Node node;
    std::unique_ptr<ObjectTransfer> transfer;
    std::unique_ptr<PullServer> server;
  };
  Peer& Add(const std::string& name, ObjectDirectory* dir = nullptr, RefLender* refs = nullptr) {
    auto p = std::make_unique<Peer>("chain-" + name);
    TransferOptions o;
    o.chunk_bytes = 1 << 20;
    o.window = 2;
    p->transfer = std::make_unique<ObjectTransfer>(p->node.table.get(), p->node.store.get(),
                                                   LoopbackTransport(io_,
                                                                     [this](const std::string& node) {
                                                                       auto it = peers_.find(node);
                                                                       return it == peers_.end()
                                                                                  ? 0
                                                                                  : it->second->server->port();
                                                                     }),
                                                   o, dir, name, refs);
    p->server = std::make_unique<PullServer>(io_, p->transfer.get());
    Peer& ref = *p;
    peers_[name] = std::move(p);
    return ref;
  }
  void Put(Peer& p, const std::string& id, uint64_t size) {
    p.node.table->AddRef(id);
    auto off = p.node.table->CreateInStore(id, size, {});
    ASSERT_TRUE(off.ok());
    for (uint64_t i = 0; i < size; ++i) p.node.store->base()[off.value() + i] = static_cast<uint8_t>(i * 13 + 1);
    ASSERT_TRUE(p.node.table->SealInStore(id).ok());
  }
  void ExpectCopy(Peer& p, const std::string& id, uint64_t size) {
    rpc::ObjectValue v;
    p.node.table->Describe(id, &v, false);
    ASSERT_EQ(v.state(), rpc::OBJ_IN_STORE) << v.error();
    ASSERT_EQ(v.size(), size);
    const uint8_t* b = p.node.store->base() + v.offset();
    for (uint64_t i = 0; i < size; ++i) ASSERT_EQ(b[i], static_cast<uint8_t>(i * 13 + 1)) << "byte " << i;
  }
  void Run(const std::function<bool()>& until) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!until() && std::chrono::steady_clock::now() < deadline) io_.run_for(std::chrono::milliseconds(5));
  }
  asio::io_context io_;
  std::unordered_map<std::string, std::unique_ptr<Peer>> peers_;
};

TEST_F(TransferChainTest, ANodeStillReceivingServesWhatItHas) {
  const std::string id(20, 'c');
  const uint64_t size = 6 << 20;
  Peer& b = Add("b");
  Peer& c = Add("c");
  Peer& a = Add("a");
  Put(b, id, size);
  b.server->stall_after = 2;  // b sends two ranges, then holds the rest back
  c.node.table->AddRef(id);
  c.transfer->Pull(id, "b");
  a.node.table->AddRef(id);
  a.transfer->Pull(id, "c");  // a reads from c, which is itself still reading from b
  Run([&] { return c.server->served >= 2; });
  EXPECT_EQ(c.server->served, 2) << "c served the ranges it had before having the whole object";
  EXPECT_FALSE(c.node.table->IsReady(id));
  b.server->Release();
  Run([&] { return a.node.table->IsReady(id); });
  ExpectCopy(c, id, size);
  ExpectCopy(a, id, size);
  EXPECT_TRUE(c.transfer->IsCopy(id));
}

TEST_F(TransferChainTest, ACopyGoesOnFromAnotherSourceWhenItsSourceDies) {
  const std::string id(20, 'r');
  const uint64_t size = 6 << 20;
  Peer& b = Add("b");
  Peer& d = Add("d");
  // The directory offers b first, then (b excluded) d, as a resumed copy
  // asks for complete copies only.
  FakeDirectory dir;
  std::vector<std::string> asked;
  dir.pick = [&](const std::string&, const std::string&, bool resuming, bool, const std::vector<std::string>& exclude,
                 std::function<void(Result<std::string>)> cb) {
    asked.push_back(resuming ? "resume" : "first");
    cb(exclude.empty() ? std::string("b") : std::string("d"));
  };
  std::vector<std::string> serving;
  dir.serving = [&](const std::string&, const std::string& node, int delta) {
    serving.push_back(node + (delta > 0 ? "+" : "-"));
  };
  Peer& a = Add("a", &dir);
  Put(b, id, size);
  Put(d, id, size);
  b.server->close_after = 2;  // b dies after two ranges
  a.node.table->AddRef(id);
  a.transfer->Pull(id, "");
  Run([&] { return a.node.table->IsReady(id); });
  ExpectCopy(a, id, size);
  EXPECT_EQ(b.server->served, 2);
  // b's second range may die with its connection; either way d sends only
  // the ranges a does not have, not the whole object again.
  EXPECT_GE(d.server->served, 4);
  EXPECT_LE(d.server->served, 5);
  EXPECT_EQ(asked, (std::vector<std::string>{"first", "resume"}));
  EXPECT_EQ(serving, (std::vector<std::string>{"b-", "d-"}));  // picks count themselves; each reader is uncounted
}

TEST_F(TransferChainTest, ARingOfCopiesFormsBeforeTheObjectReachesItsMiddle) {
  // a copies from c, which has not heard of the object yet; c copies it
  // from b later. a waits for c instead of failing, and reads from c only.
  const std::string id(20, 'w');
  const uint64_t size = 6 << 20;
  Peer& b = Add("b");
  Peer& c = Add("c");
  Peer& a = Add("a");
  Put(b, id, size);
  a.node.table->AddRef(id);
  a.transfer->CopyFrom(id, "c", 10000);
  io_.run_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(a.node.table->IsReady(id)) << "a waits for c";
  c.node.table->AddRef(id);
  c.transfer->CopyFrom(id, "b", 10000);
  Run([&] { return a.node.table->IsReady(id); });
  ExpectCopy(a, id, size);
  ExpectCopy(c, id, size);
  EXPECT_EQ(b.server->served, 6) << "only c read from b";
  EXPECT_EQ(c.server->served, 6);
}

TEST_F(TransferChainTest, AWaitForAnObjectThatNeverComesEndsWithTheReason) {
  const std::string id(20, 'n');
  Peer& c = Add("c");
  Peer& a = Add("a");
  a.node.table->AddRef(id);
  a.transfer->CopyFrom(id, "c", 100);
  io_.run_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(a.node.table->IsReady(id)) << "c holds the request until its time is up";
  c.transfer->ReleaseIdle(std::chrono::steady_clock::now(), std::chrono::milliseconds(0));
  Run([&] { return a.node.table->IsReady(id); });
  rpc::ObjectValue v;
  a.node.table->Describe(id, &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("did not come"), std::string::npos) << v.error();
  EXPECT_NE(v.error().find(phalanx::ToHex("c").substr(0, 12)), std::string::npos) << "names the node: " << v.error();
  EXPECT_EQ(a.transfer->num_pulling(), 0u);
}

TEST_F(TransferChainTest, AStoppedCopyFailsWithTheReasonAndFreesItsSpace) {
  const std::string id(20, 's');
  Peer& b = Add("b");
  Peer& a = Add("a");
  Put(b, id, 6 << 20);
  b.server->stall_after = 1;
  a.node.table->AddRef(id);
  a.transfer->CopyFrom(id, "b", 10000);
  Run([&] { return b.server->served >= 1; });
  io_.run_for(std::chrono::milliseconds(50));
  a.transfer->StopCopy(id, "the allreduce is over");
  rpc::ObjectValue v;
  a.node.table->Describe(id, &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("the allreduce is over"), std::string::npos) << v.error();
  EXPECT_EQ(a.transfer->num_pulling(), 0u);
  a.node.table->RemoveRef(id);
  EXPECT_EQ(a.node.store->Stats().objects, 0u);
  b.server->Release();  // replies still on the way find nothing
  io_.run_for(std::chrono::milliseconds(100));
  EXPECT_EQ(a.node.store->Stats().objects, 0u);
}

}  // namespace phalanx::objectstore

namespace phalanx::objectstore {

TEST_F(TransferChainTest, RefsInsideAValueComeWithItLentOncePerCopy) {
  std::vector<std::pair<std::string, std::string>> lent;  // (reader, id) on b
  Peer& a = Add("a");
  RecordingLender lender;
  lender.lend = [&](const std::string& node, const std::string& id) { lent.emplace_back(node, id); };
  Peer& b = Add("b", nullptr, &lender);
  const std::string inner(20, 'i'), small(20, 'o'), large(20, 's');
  Put(b, inner, 1000);
  b.node.table->AddRef(small);
  b.node.table->PutInline(small, "a list of refs", {inner});
  b.node.table->AddRef(large);
  ASSERT_TRUE(b.node.table->CreateInStore(large, 3 << 20, {inner}).ok());  // three ranges
  ASSERT_TRUE(b.node.table->SealInStore(large).ok());
  auto& dropped = a.node.owner.dropped;
  dropped.clear();
  for (const auto& id : {small, large}) {
    a.node.table->AddRef(id);
    a.transfer->Pull(id, "b");
  }
  Run([&] { return a.node.table->IsReady(small) && a.node.table->IsReady(large); });
  rpc::ObjectValue v;
  a.node.table->Describe(small, &v, false);
  ASSERT_EQ(v.state(), rpc::OBJ_INLINE) << v.error();
  ASSERT_EQ(v.contained_ids_size(), 1);
  EXPECT_EQ(v.contained_ids(0), inner);
  EXPECT_EQ(a.node.table->Contained(large), std::vector<std::string>{inner});
  // The inner object is b's: remote here, read from b when needed.
  EXPECT_EQ(a.node.table->RemoteNode(inner), "b");
  EXPECT_FALSE(a.node.table->IsReady(inner));
  // b lent it once for each copy (not once per range of the large one).
  std::vector<std::pair<std::string, std::string>> want{{"a", inner}, {"a", inner}};
  EXPECT_EQ(lent, want);
  // Both copies dropped here: both holds at b are let go, in one count.
  a.node.table->RemoveRef(small);
  a.node.table->RemoveRef(large);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], std::make_tuple(inner, std::string("b"), 2u));
}

}  // namespace phalanx::objectstore
