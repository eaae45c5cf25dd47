// ObjectTransfer between two object tables (two "nodes" in one process) over
// real TCP on loopback: chunked copies, objects that are not ready yet,
// unknown objects, and a server that goes away mid-copy.
#include "objectstore/object_transfer.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/ids.h"

namespace phalanx::objectstore {

namespace asio = boost::asio;

struct Node {
  explicit Node(const char* name) {
    auto region = ShmRegion::Create(64 << 20, name);
    EXPECT_TRUE(region.ok());
    store = std::make_unique<ObjectStore>(std::move(region).value());
    table = std::make_unique<ObjectTable>(store.get());
  }
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

 private:
  void Accept() {
    acceptor_.async_accept([this](auto ec, asio::ip::tcp::socket s) {
      if (ec) return;
      FramedConnection::Socket g(io_);
      g.assign(asio::generic::stream_protocol(AF_INET, SOCK_STREAM), s.release());
      auto c = std::make_shared<FramedConnection>(std::move(g), "serving node");
      conns_.push_back(c);
      std::weak_ptr<FramedConnection> weak = c;
      c->Start(
          [this, weak](const FrameHeader& h, const char* body, size_t len) {
            rpc::PullObject m;
            ASSERT_TRUE(m.ParseFromArray(body, static_cast<int>(len)));
            uint64_t req = h.request_id;
            transfer_->Serve(m, [this, weak, req](const rpc::PullObjectReply& r) {
              auto c = weak.lock();
              if (!c) return;
              if (close_after >= 0 && served >= close_after) return c->Close();
              ++served;
              c->Send(rpc::PULL_OBJECT, kReplyFlag, req, r);
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
};

class ObjectTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_transfer_ = std::make_unique<ObjectTransfer>(b_.table.get(), b_.store.get(), nullptr);
    server_ = std::make_unique<PullServer>(io_, server_transfer_.get());
    TransferOptions small_chunks;
    small_chunks.chunk_bytes = 1 << 20;
    small_chunks.window = 3;
    puller_ = std::make_unique<ObjectTransfer>(
        a_.table.get(), a_.store.get(),
        [this](const std::string& node, std::function<void(Result<std::shared_ptr<RpcClient>>)> done) {
          EXPECT_EQ(node, "node-b");
          RpcClient::ConnectTcp(io_, "127.0.0.1", server_->port(), 2000,
                                [done](Result<std::shared_ptr<RpcClient>> r) {
                                  if (r.ok()) r.value()->Start();
                                  done(std::move(r));
                                });
        },
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

}  // namespace phalanx::objectstore
