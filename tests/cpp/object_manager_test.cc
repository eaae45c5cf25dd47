// The object layer as one component (objectstore/object_manager.h): object
// managers of three nodes in one process, their copies over an in-memory
// transport (memory_network.h), their RELEASE_HELD messages over a fake
// PeerChannel that delivers them on the next turn of the loop, and the GCS
// directory and the raylet replaced by recorders. What is checked is what
// the raylet and the other nodes see: bytes copied, holds taken and let go,
// frees and adoptions told, directory entries made and removed.
#include "objectstore/object_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "memory_network.h"
#include "fake_directory.h"

namespace phalanx::objectstore {
namespace {

namespace asio = boost::asio;

class ObjectManagerTest : public ::testing::Test {
 protected:
  // One node: its object manager, what it was told, what it listed.
  struct Node : PeerChannel, ObjectEvents {
    ObjectManagerTest* test = nullptr;
    std::string name;
    std::unique_ptr<ObjectManager> om;
    std::vector<std::tuple<std::string, bool, bool>> freed;                     // (id, in store, copy)
    std::vector<std::pair<std::string, std::vector<std::string>>> adopted;     // (holder, ids)
    std::vector<std::pair<std::string, rpc::ReleaseHeld>> sent;                // (to node, message)
    std::set<std::string> listed;                                              // ids listed complete here
    FakeDirectory dir;

    void Call(const std::string& node, rpc::MessageType type, const google::protobuf::Message& m, int64_t,
              std::function<void(Result<std::string>)> done) override {
      ASSERT_EQ(type, rpc::RELEASE_HELD) << "the object layer sends only RELEASE_HELD itself";
      rpc::ReleaseHeld msg;
      msg.CopyFrom(m);
      sent.emplace_back(node, msg);
      test->Deliver(node, msg, std::move(done));
    }
    void OnObjectFreed(const std::string& id, bool in_store, bool copy) override {
      freed.emplace_back(id, in_store, copy);
    }
    void OnAdopted(const std::string& holder, const std::vector<std::string>& ids) override {
      adopted.emplace_back(holder, ids);
    }
  };

  Node& Add(const std::string& name) {
    auto n = std::make_unique<Node>();
    n->test = this;
    n->name = name;
    auto region = ShmRegion::Create(32 << 20, ("om-" + name).c_str());
    EXPECT_TRUE(region.ok());
    TransferOptions o;
    o.chunk_bytes = 256 << 10;
    Node* raw = n.get();
    raw->dir.located = [raw](const std::string& id, uint64_t, uint64_t, bool complete) {
      if (complete) raw->listed.insert(id);
    };
    raw->dir.unlisted = [raw](const std::string& id) { raw->listed.erase(id); };
    n->om = std::make_unique<ObjectManager>(io_, name, std::make_unique<ObjectStore>(std::move(region).value()),
                                            std::make_unique<MemoryNetwork::Endpoint>(&net_), raw, raw, o, &raw->dir);
    net_.Join(name, &n->om->transfer());
    Node& ref = *n;
    nodes_[name] = std::move(n);
    return ref;
  }
  // A RELEASE_HELD reaches `node` on a later turn, as over a socket.
  void Deliver(const std::string& node, const rpc::ReleaseHeld& m, std::function<void(Result<std::string>)> done) {
    asio::post(io_, [this, node, m, done] {
      auto it = nodes_.find(node);
      if (it == nodes_.end() || dead_.count(node)) {
        if (done) done(Status::Unavailable("node " + node + " is not alive"));
        return;
      }
      it->second->om->HandleReleaseHeld(m);
      if (done) done(std::string());
    });
  }
  // A store object of `size` bytes made at `n` (held once by its maker).
  void Put(Node& n, const std::string& id, uint64_t size) {
    ObjectTable& t = n.om->table();
    t.AddRef(id);
    auto off = t.CreateInStore(id, size, {});
    ASSERT_TRUE(off.ok());
    for (uint64_t i = 0; i < size; ++i) n.om->store().base()[off.value() + i] = static_cast<uint8_t>(i * 7 + 1);
    ASSERT_TRUE(t.SealInStore(id).ok());
    n.om->ListInDirectory(id, size);
  }
  void ExpectBytes(Node& n, const std::string& id, uint64_t size) {
    rpc::ObjectValue v;
    n.om->table().Describe(id, &v, false);
    ASSERT_EQ(v.state(), rpc::OBJ_IN_STORE) << v.error();
    ASSERT_EQ(v.size(), size);
    const uint8_t* b = n.om->store().base() + v.offset();
    for (uint64_t i = 0; i < size; ++i) ASSERT_EQ(b[i], static_cast<uint8_t>(i * 7 + 1)) << "byte " << i;
  }
  void Run(const std::function<bool()>& until) { RunUntil(io_, until); }
  // Turns the loop until nothing is left to run.
  void Settle() {
    io_.restart();
    io_.poll();
    io_.restart();
  }

  asio::io_context io_;
  MemoryNetwork net_{io_};
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::set<std::string> dead_;
  const std::string x_ = std::string(20, 'x');
  const std::string y_ = std::string(20, 'y');
  const std::string z_ = std::string(20, 'z');
};

// A result made on b and lent to a (SetRemote): a's first waiter copies it
// through the transport; once here, a lets go of b's hold, and b frees it
// when its maker lets go too. Each node lists only its own copy.
TEST_F(ObjectManagerTest, ARemoteObjectIsCopiedOnDemandAndTheLenderLetsGo) {
  Node& a = Add("a");
  Node& b = Add("b");
  const uint64_t size = (1 << 20) + 99;
  Put(b, x_, size);
  b.om->HoldFor("a", x_);  // lent to a (a direct call's result, say)
  EXPECT_EQ(b.om->holds_for("a", x_), 1u);
  a.om->table().AddRef(x_);
  ASSERT_TRUE(a.om->table().SetRemote(x_, "b", size));
  Settle();
  EXPECT_EQ(net_.served("b"), 0) << "nothing copied before someone waits for it";
  bool ready = false;
  a.om->table().OnReady(x_, [&] { ready = true; });
  Run([&] { return ready && b.om->holds_for("a", x_) == 0; });
  ASSERT_TRUE(ready);
  ExpectBytes(a, x_, size);
  EXPECT_EQ(b.om->holds_for("a", x_), 0u) << "a released b's hold once the copy was here";
  ASSERT_EQ(a.sent.size(), 1u);
  EXPECT_EQ(a.sent[0].first, "b");
  EXPECT_FALSE(a.sent[0].second.adopt());
  EXPECT_TRUE(a.listed.count(x_)) << "a lists its copy";
  EXPECT_TRUE(b.listed.count(x_));
  // b's maker lets go: b keeps its copy while a reader may still ask for
  // ranges, then frees it (a store object, b's own).
  b.om->table().RemoveRef(x_);
  EXPECT_TRUE(b.freed.empty()) << "kept for a while after the last range served";
  b.om->ReleaseIdle(std::chrono::steady_clock::now() + ObjectManager::kServeLinger * 2);
  ASSERT_EQ(b.freed.size(), 1u);
  EXPECT_EQ(b.freed[0], std::make_tuple(x_, true, false));
  EXPECT_FALSE(b.listed.count(x_));
  // a frees its copy: the raylet is told it was a copy (its task is b's record).
  a.om->table().RemoveRef(x_);
  ASSERT_EQ(a.freed.size(), 1u);
  EXPECT_EQ(a.freed[0], std::make_tuple(x_, true, true));
  EXPECT_FALSE(a.listed.count(x_));
  EXPECT_FALSE(a.om->transfer().IsCopy(x_));
}

// Releases to one node in one turn go as one message, with counts.
TEST_F(ObjectManagerTest, ReleasesOfOneTurnGoAsOneMessagePerNode) {
  Node& a = Add("a");
  Node& b = Add("b");
  Node& c = Add("c");
  for (const auto& id : {x_, y_}) {
    b.om->table().AddRef(id);
    b.om->table().PutInline(id, "v", {});
    b.om->HoldFor("a", id);
    b.om->HoldFor("a", id);
  }
  c.om->table().AddRef(z_);
  c.om->table().PutInline(z_, "w", {});
  c.om->HoldFor("a", z_);
  a.om->Release("b", {x_, y_});
  a.om->Release("b", {x_});
  a.om->Release("c", {z_});
  a.om->Release("a", {z_});  // (itself: nothing to send)
  EXPECT_TRUE(a.sent.empty()) << "sent at the end of the turn";
  Run([&] { return b.om->holds_for("a", x_) == 0 && c.om->holds_for("a", z_) == 0; });
  ASSERT_EQ(a.sent.size(), 2u);
  std::map<std::string, rpc::ReleaseHeld> by_node;
  for (const auto& [node, m] : a.sent) by_node[node] = m;
  ASSERT_EQ(by_node["b"].object_ids_size(), 2);
  std::map<std::string, uint32_t> counts;
  for (int i = 0; i < by_node["b"].object_ids_size(); ++i) counts[by_node["b"].object_ids(i)] = by_node["b"].counts(i);
  EXPECT_EQ(counts[x_], 2u);
  EXPECT_EQ(counts[y_], 1u);
  EXPECT_EQ(b.om->holds_for("a", y_), 1u) << "one of the two holds of y is left";
  EXPECT_EQ(c.om->holds_for("a", z_), 0u);
}

// A node adopts what a client of another node made: that node holds it for
// the adopter and tells its raylet, which drops the client's holds.
TEST_F(ObjectManagerTest, AnAdoptionHoldsForTheAdopterAndTellsTheRaylet) {
  Node& a = Add("a");
  Node& b = Add("b");
  b.om->table().AddRef(y_);  // the actor worker's hold at b
  b.om->table().PutInline(y_, "made by a worker", {});
  const std::string gone(20, 'g');  // its maker exited already: nothing to hold
  a.om->Adopt("b", "worker-7", {y_, gone});
  Run([&] { return !b.adopted.empty(); });
  ASSERT_EQ(b.adopted.size(), 1u);
  EXPECT_EQ(b.adopted[0].first, "worker-7");
  EXPECT_EQ(b.adopted[0].second, (std::vector<std::string>{y_, gone}));
  EXPECT_EQ(b.om->holds_for("a", y_), 1u);
  EXPECT_EQ(b.om->holds_for("a", gone), 0u) << "what is not here is not held";
  EXPECT_FALSE(b.om->table().Contains(gone));
  // The worker's hold goes (the raylet does it on OnAdopted): y stays, held for a.
  b.om->table().RemoveRef(y_);
  EXPECT_TRUE(b.om->table().IsReady(y_));
  EXPECT_TRUE(b.freed.empty());
}

// A node dies: what was held for it is let go (and freed where nobody else
// holds it), and nothing more is sent its way.
TEST_F(ObjectManagerTest, ADeadNodesHoldsGoAndNothingIsReleasedToIt) {
  Node& a = Add("a");
  Node& b = Add("b");
  Put(b, x_, 4096);
  b.om->HoldFor("a", x_);
  b.om->HoldFor("a", x_);
  b.om->table().RemoveRef(x_);  // the maker lets go: a's holds keep it
  EXPECT_TRUE(b.om->table().IsReady(x_));
  EXPECT_EQ(b.om->num_held_for("a"), 1u);
  b.om->Release("a", {y_});  // pending when a dies
  b.om->NodeDied("a");
  EXPECT_EQ(b.om->num_held_for("a"), 0u);
  EXPECT_FALSE(b.om->table().Contains(x_));
  ASSERT_EQ(b.freed.size(), 1u);
  EXPECT_EQ(std::get<0>(b.freed[0]), x_);
  Settle();
  EXPECT_TRUE(b.sent.empty()) << "no release is sent to a dead node";
  (void)a;
}

// Refs that arrive inside a value from another node are borrowed: the ones
// this node has otherwise are released at once, the others stay remote
// there until this node lets go.
TEST_F(ObjectManagerTest, BorrowedRefsKnownHereAreReleasedAtOnce) {
  Node& a = Add("a");
  Node& b = Add("b");
  for (const auto& id : {x_, y_}) {
    b.om->table().AddRef(id);
    b.om->table().PutInline(id, "v", {});
    b.om->HoldFor("a", id);  // lent to a inside a value
  }
  a.om->table().AddRef(x_);
  a.om->table().PutInline(x_, "a has x itself", {});
  a.om->Borrow({x_, y_}, "b");  // the value's refs: a's own reference to each, for now
  Run([&] { return b.om->holds_for("a", x_) == 0; });
  EXPECT_EQ(b.om->holds_for("a", x_), 0u) << "a has x: b's hold is not needed";
  EXPECT_EQ(b.om->holds_for("a", y_), 1u) << "y stays held at b while a refers to it";
  EXPECT_EQ(a.om->table().RemoteNode(y_), "b");
  a.om->table().RemoveRef(y_);  // the borrowed reference goes
  Run([&] { return b.om->holds_for("a", y_) == 0; });
  EXPECT_EQ(b.om->holds_for("a", y_), 0u);
}

// A range request for an object this node does not have and never will is
// answered (ServePull) with why, and a copy of it fails naming the node.
TEST_F(ObjectManagerTest, ACopyOfWhatTheLenderLostFailsNamingIt) {
  Node& a = Add("a");
  Add("b");
  a.om->table().AddRef(z_);
  ASSERT_TRUE(a.om->table().SetRemote(z_, "b", 1 << 20));
  bool settled = false;
  a.om->table().OnReady(z_, [&] { settled = true; });
  Run([&] { return settled; });
  ASSERT_TRUE(settled);
  rpc::ObjectValue v;
  a.om->table().Describe(z_, &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("tried 62"), std::string::npos) << "names b (hex 62): " << v.error();
}

}  // namespace
}  // namespace phalanx::objectstore
