// What a raylet service is tested alone with: one node's object layer in
// memory (an ObjectManager over a real store, with no transport: nothing is
// copied from other nodes), a real redis-server for the GCS, a Router the
// service adds its routes to, and one registered client on a socket pair.
// Frames go in through the router as the ClientService would hand them on;
// what the service answers is read from the socket's other end.
#pragma once

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "core/frame_reader.h"
#include "core/ids.h"
#include "core/peer_channel.h"
#include "gcs/gcs_client.h"
#include "objectstore/object_manager.h"
#include "objectstore/shm_region.h"
#include "scheduler/clients.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/router.h"
#include "scheduler/task_table.h"
#include "scheduler/worker_pool.h"
#include "tests/cpp/test_util.h"

namespace phalanx::scheduler::testing {

// A PeerChannel that records what it was asked to send and answers nothing
// (`answer`, when set, gives the reply).
class RecordingPeers final : public PeerChannel {
 public:
  struct Sent {
    std::string node;
    rpc::MessageType type;
    std::string body;
  };
  void Call(const std::string& node, rpc::MessageType type, const google::protobuf::Message& m, int64_t,
            std::function<void(Result<std::string>)> done) override {
    sent.push_back({node, type, m.SerializeAsString()});
    if (answer && done) done(answer(sent.back()));
  }
  std::vector<Sent> sent;
  std::function<Result<std::string>(const Sent&)> answer;
};

// The task queue's specs as the streams and the actors' door see them.
class SpecTable final : public TaskTable {
 public:
  void Submit(rpc::TaskSpec) override {}
  bool HasTask(const std::string& id) const override { return specs.count(id) > 0; }
  rpc::TaskSpec* MutableSpec(const std::string& id) override {
    auto it = specs.find(id);
    return it == specs.end() ? nullptr : &it->second;
  }
  bool BuildForwardSpec(const std::string&, rpc::TaskSpec*) override { return false; }
  bool PushTo(Worker*, const std::string&) override { return false; }
  void FailTask(const std::string&, StatusCode, const std::string&) override {}
  void FinishTask(const std::string&, bool, const std::string&) override {}
  void Redispatch() override {}
  void After(int64_t, std::function<void()>) override {}
  int64_t infeasible_timeout_ms() const override { return 0; }
  std::map<std::string, rpc::TaskSpec> specs;
};

// The task queue as the object requests see it: who blocked, who came back; no lineage.
class RecordingObjectTasks final : public ObjectTasks {
 public:
  void OnWorkerBlocked(Worker* w) override { events.push_back("blocked " + std::to_string(w->pid)); }
  void OnWorkerUnblocked(Worker* w) override { events.push_back("unblocked " + std::to_string(w->pid)); }
  bool Rebuild(const std::string&, std::string* why) override {
    *why = "no lineage kept in this test";
    return false;
  }
  std::vector<std::string> events;
};

class AllAlive final : public NodeLiveness {
 public:
  bool IsAlive(const std::string&) const override { return true; }
};

class ServiceTest : public ::testing::Test {
 protected:
  static constexpr char kNode[] = "node-under-test!";  // 16 bytes, as a node id

  void SetUp() override {
    redis_ = std::make_unique<phalanx::testing::RedisServer>();
    redis_client_ = std::make_unique<RedisClient>(io_, "127.0.0.1", redis_->port());
    ASSERT_TRUE(redis_client_->Connect(2000).ok());
    gcs_ = std::make_unique<GcsClient>(redis_client_.get());
    auto region = objectstore::ShmRegion::Create(16 << 20, "service-test");
    ASSERT_TRUE(region.ok());
    om_ = std::make_unique<objectstore::ObjectManager>(
        io_, kNode, std::make_unique<objectstore::ObjectStore>(std::move(region).value()), nullptr, &peers_, nullptr);
    client_ = Connect(std::string(kClientIdSize, 'c'), &other_);
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }

  // A registered client with that id; *far is the socket end its replies arrive on.
  std::shared_ptr<Client> Connect(const std::string& client_id, int* far) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    FramedConnection::Socket s(io_);
    s.assign(boost::asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), fds[0]);
    auto conn = std::make_shared<FramedConnection>(std::move(s), "test client");
    conn->Start([](const FrameHeader&, const char*, size_t) {}, [](const Status&) {});
    auto c = clients_.Add(conn);
    c->client_id = client_id;
    c->registered = true;
    c->pid = 4242;
    clients_.Registered(c.get());
    *far = fds[1];
    fds_.push_back(fds[1]);
    return c;
  }

  // `m` as if `c` (the test's client by default) sent it.
  void Send(uint16_t type, uint64_t req, const google::protobuf::MessageLite& m, std::shared_ptr<Client> c = nullptr) {
    std::string body = m.SerializeAsString();
    FrameHeader h;
    h.type = type;
    h.request_id = req;
    h.length = static_cast<uint32_t>(body.size());
    router_.ClientFrame(c ? c : client_, h, body.data(), body.size());
  }

  // Runs the loop until a frame arrives on `fd` (the test's client's by
  // default), up to `timeout_ms`: false if none came.
  bool Next(FrameHeader* h, std::string* body, int timeout_ms = 10000, int fd = -1) {
    fd = fd < 0 ? other_ : fd;
    std::string& got = got_[fd];
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (got.size() >= kFrameHeaderSize) {
        *h = DecodeHeader(got.data());
        if (got.size() >= kFrameHeaderSize + h->length) {
          body->assign(got.data() + kFrameHeaderSize, h->length);
          got.erase(0, kFrameHeaderSize + h->length);
          return true;
        }
      }
      if (std::chrono::steady_clock::now() >= until) return false;
      io_.run_for(std::chrono::milliseconds(5));
      char buf[65536];
      ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
  }
  // The next frame, which must be a `type` reply to request `req`, parsed.
  template <typename M>
  M Reply(uint16_t type, uint64_t req, int timeout_ms = 10000) {
    M m;
    FrameHeader h;
    std::string body;
    if (!Next(&h, &body, timeout_ms)) {
      ADD_FAILURE() << "no reply of type " << type;
      return m;
    }
    EXPECT_EQ(h.type, type);
    EXPECT_EQ(h.request_id, req);
    EXPECT_TRUE(m.ParseFromString(body));
    return m;
  }
  // Runs the loop until `done` holds (up to 10 s).
  bool RunUntil(const std::function<bool()>& done) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      io_.run_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  // An object id made by client `client_id` (its task `n`'s first return).
  static std::string ObjectOf(const std::string& client_id, uint64_t n) {
    return MakeObjectId(MakeTaskId(client_id, n), 1);
  }

  objectstore::ObjectTable& table() { return om_->table(); }

  boost::asio::io_context io_;
  std::unique_ptr<phalanx::testing::RedisServer> redis_;
  std::unique_ptr<RedisClient> redis_client_;
  std::unique_ptr<GcsClient> gcs_;
  RecordingPeers peers_;
  std::unique_ptr<objectstore::ObjectManager> om_;
  Clients clients_;
  Router router_;
  std::shared_ptr<Client> client_;
  int other_ = -1;
  std::vector<int> fds_;
  std::map<int, std::string> got_;
};

}  // namespace phalanx::scheduler::testing
