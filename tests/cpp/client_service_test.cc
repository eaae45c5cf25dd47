// ClientService alone, on a real Unix socket (tests/cpp/service_fixture.h
// for the object layer and the GCS): a driver registers and gets the store's
// descriptor and the node's facts; a worker with a token this raylet never
// gave is refused, and so is a malformed client id, each saying why; a
// client's exit tells each watcher, in order, who it was; Stop tells each
// driver why and removes the socket.
#include "scheduler/client_service.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <filesystem>

#include "core/status_proto.h"
#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class NoQueue final : public TaskQueue {
 public:
  void Submit(rpc::TaskSpec) override {}
  void OnWorkerRegistered(Worker*) override { ++workers; }
  void OnTaskDone(Worker*, rpc::TaskDone) override {}
  void OnTasksRecalled(Worker*, const rpc::TaskIds&) override {}
  void Cancel(const rpc::CancelTask&) override {}
  int workers = 0;
};

class NoDeaths final : public WorkerDeaths {
 public:
  void OnWorkerDied(Worker*, const std::string&) override {}
};

// Writes down, in one shared log, each exit it is told of.
class Watcher final : public ClientWatcher {
 public:
  Watcher(std::string name, std::vector<std::string>* log) : name_(std::move(name)), log_(log) {}
  void OnClientGone(Client& c, const std::string& why) override {
    log_->push_back(name_ + ": " + std::to_string(c.pid) + " " + why);
  }

 private:
  std::string name_;
  std::vector<std::string>* log_;
};

class ClientServiceTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    dir_ = phalanx::testing::TempDir("client-service");
    options_.socket_path = dir_ + "/raylet.sock";
    options_.session_dir = dir_;
    options_.node_ip = "127.0.0.1";
    options_.cluster_token = "client-service-token";
    options_.inline_threshold = 4096;
    pool_ = std::make_unique<WorkerPool>(
        io_, WorkerPoolOptions{"/bin/false", "", options_.socket_path, dir_, dir_ + "/logs", {}}, &deaths_);
    requests_ = std::make_unique<ObjectRequests>(io_, kNode, om_.get(), &object_tasks_, &alive_, gcs_.get(), &clients_,
                                                 5000);
    first_ = std::make_unique<Watcher>("first", &log_);
    second_ = std::make_unique<Watcher>("second", &log_);
    service_ = std::make_unique<ClientService>(io_, kNode, options_, &router_, &clients_, pool_.get(), om_.get(),
                                               redis_client_.get(), requests_.get(), &queue_,
                                               std::vector<ClientWatcher*>{first_.get(), second_.get()});
    service_->AddRoutes(router_);
    ASSERT_TRUE(service_->Listen().ok());
  }
  void TearDown() override {
    service_->Stop("test over");
    for (int fd : socks_) ::close(fd);
    requests_->Stop();
    ServiceTest::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // A process's connection to the raylet's socket (non-blocking).
  int Dial() {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", options_.socket_path.c_str());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socks_.push_back(fd);
    return fd;
  }
  void Write(int fd, uint16_t type, uint64_t req, const google::protobuf::MessageLite& m) {
    std::string f = EncodeFrame(type, 0, req, m);
    ASSERT_EQ(::send(fd, f.data(), f.size(), 0), static_cast<ssize_t>(f.size()));
  }
  // The next frame on `fd` (running the loop meanwhile), and a descriptor that came with it (-1 if none).
  bool ReadFrame(int fd, FrameHeader* h, std::string* body, int* passed_fd) {
    *passed_fd = -1;
    std::string got;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      io_.run_for(std::chrono::milliseconds(5));
      char buf[65536];
      iovec iov{buf, sizeof(buf)};
      alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof(ctrl);
      ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
      if (n == 0) return false;  // closed
      if (n < 0) continue;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_type == SCM_RIGHTS) std::memcpy(passed_fd, CMSG_DATA(c), sizeof(int));
      }
      got.append(buf, static_cast<size_t>(n));
      if (got.size() >= kFrameHeaderSize) {
        *h = DecodeHeader(got.data());
        if (got.size() >= kFrameHeaderSize + h->length) {
          body->assign(got.data() + kFrameHeaderSize, h->length);
          return true;
        }
      }
    }
    return false;
  }
  rpc::RegisterClient Driver(char id, int pid) {
    rpc::RegisterClient m;
    m.set_client_id(std::string(kClientIdSize, id));
    m.set_pid(pid);
    return m;
  }
  // Registers a driver on a new connection; returns the connection.
  int RegisteredDriver(char id, int pid) {
    int fd = Dial();
    Write(fd, rpc::REGISTER_CLIENT, 1, Driver(id, pid));
    FrameHeader h;
    std::string body;
    int store_fd = -1;
    EXPECT_TRUE(ReadFrame(fd, &h, &body, &store_fd));
    if (store_fd >= 0) ::close(store_fd);
    return fd;
  }
  // Sends `m` on a new connection and reads the refusal: its status; `passed`
  // is the descriptor that came with it (-1: none).
  Status RefusalOf(const rpc::RegisterClient& m, uint64_t req, int* passed) {
    int fd = Dial();
    Write(fd, rpc::REGISTER_CLIENT, req, m);
    FrameHeader h;
    std::string body;
    *passed = -1;
    if (!ReadFrame(fd, &h, &body, passed)) return Status::Internal("no reply to the registration");
    rpc::RegisterClientReply r;
    if (!r.ParseFromString(body)) return Status::Internal("the reply does not parse");
    return FromProto(r.status());
  }

  std::string dir_;
  RayletOptions options_;
  NoQueue queue_;
  NoDeaths deaths_;
  testing::RecordingObjectTasks object_tasks_;
  testing::AllAlive alive_;
  std::vector<std::string> log_;
  std::unique_ptr<Watcher> first_, second_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<ObjectRequests> requests_;
  std::unique_ptr<ClientService> service_;
  std::vector<int> socks_;
};

TEST_F(ClientServiceTest, ADriverRegistersAndGetsTheStoreAndTheNodesFacts) {
  int fd = Dial();
  Write(fd, rpc::REGISTER_CLIENT, 3, Driver('d', 1234));
  FrameHeader h;
  std::string body;
  int store_fd = -1;
  ASSERT_TRUE(ReadFrame(fd, &h, &body, &store_fd));
  EXPECT_EQ(h.type, rpc::REGISTER_CLIENT);
  EXPECT_EQ(h.request_id, 3u);
  rpc::RegisterClientReply r;
  ASSERT_TRUE(r.ParseFromString(body));
  EXPECT_TRUE(FromProto(r.status()).ok()) << FromProto(r.status()).ToString();
  EXPECT_EQ(r.node_id(), kNode);
  EXPECT_EQ(r.inline_threshold(), 4096u);
  EXPECT_EQ(r.session_dir(), dir_);
  ASSERT_GE(store_fd, 0) << "the store's descriptor comes with the reply";
  struct stat st {};
  ASSERT_EQ(::fstat(store_fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), r.store_capacity());
  ::close(store_fd);
  ASSERT_NE(clients_.Find(std::string(kClientIdSize, 'd')), nullptr);
}

TEST_F(ClientServiceTest, AWorkerWithATokenThisRayletNeverGaveIsRefused) {
  rpc::RegisterClient m = Driver('w', 99);
  m.set_is_worker(true);
  m.set_worker_token("a token nobody gave");
  int passed = -1;
  Status st = RefusalOf(m, 4, &passed);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("unknown worker token"), std::string::npos) << st.ToString();
  EXPECT_LT(passed, 0) << "no store for it";
  EXPECT_EQ(queue_.workers, 0);
}

TEST_F(ClientServiceTest, AMalformedClientIdIsRefusedSayingWhy) {
  rpc::RegisterClient m = Driver('x', 5);
  m.set_client_id("short");
  int passed = -1;
  Status st = RefusalOf(m, 5, &passed);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("malformed client id"), std::string::npos) << st.ToString();
  EXPECT_LT(passed, 0) << "no store for it";
  EXPECT_EQ(clients_.Find("short"), nullptr) << "not registered";
}

TEST_F(ClientServiceTest, AClientsExitTellsEachWatcherInOrderWhoItWas) {
  int fd = RegisteredDriver('e', 321);
  ::shutdown(fd, SHUT_RDWR);
  ASSERT_TRUE(RunUntil([&] { return log_.size() == 2; }));
  EXPECT_EQ(log_[0].rfind("first: 321 driver process 321 on node " + ToHex(kNode).substr(0, 12) + " exited", 0), 0u)
      << log_[0];
  EXPECT_EQ(log_[1].rfind("second: 321 ", 0), 0u) << log_[1];
  EXPECT_TRUE(RunUntil([&] { return clients_.Find(std::string(kClientIdSize, 'e')) == nullptr; }));
}

TEST_F(ClientServiceTest, StopTellsEachDriverWhyAndRemovesTheSocket) {
  int fd = RegisteredDriver('s', 654);
  service_->Stop("raylet /tmp/x stopped: maintenance");
  FrameHeader h;
  std::string body;
  int passed = -1;
  ASSERT_TRUE(ReadFrame(fd, &h, &body, &passed));
  EXPECT_EQ(h.type, rpc::RAYLET_FAILING);
  rpc::Status st;
  ASSERT_TRUE(st.ParseFromString(body));
  EXPECT_NE(FromProto(st).message().find("maintenance"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(options_.socket_path));
  ::shutdown(fd, SHUT_RDWR);
  io_.run_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(log_.empty()) << "after Stop no watcher is told";
}

}  // namespace
}  // namespace phalanx::scheduler
