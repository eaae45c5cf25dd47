// The OutputRelay alone, over a real redis-server: a worker's lines land in
// its job's stream with the pid of its registration and this node's
// address (whatever the message says), a driver's are dropped, and a
// message past the size limits closes the connection, nothing written.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include "gcs/gcs_client.h"
#include "core/ids.h"
#include "gcs/gcs_tables.h"
#include "scheduler/output_relay.h"
#include "tests/cpp/test_util.h"

namespace phalanx::scheduler {
namespace {

namespace asio = boost::asio;

class OutputRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>();
    client_ = std::make_unique<RedisClient>(io_, "127.0.0.1", redis_->port());
    ASSERT_TRUE(client_->Connect(2000).ok());
    gcs_ = std::make_unique<GcsClient>(client_.get());
    relay_ = std::make_unique<OutputRelay>(gcs_.get(), "10.1.2.3");
    relay_->AddRoutes(router_);
  }
  void TearDown() override {
    for (int fd : others_) ::close(fd);
  }

  std::shared_ptr<Client> MakeClient(bool is_worker, int pid) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    FramedConnection::Socket s(io_);
    s.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), fds[0]);
    auto conn = std::make_shared<FramedConnection>(std::move(s), "test client");
    conn->Start([](const FrameHeader&, const char*, size_t) {}, [](const Status&) {});
    others_.push_back(fds[1]);
    auto c = std::make_shared<Client>();
    c->conn = conn;
    c->registered = true;
    c->is_worker = is_worker;
    c->pid = pid;
    return c;
  }
  void Send(const std::shared_ptr<Client>& c, const rpc::WorkerOutput& m) {
    std::string body = m.SerializeAsString();
    FrameHeader h;
    h.type = rpc::WORKER_OUTPUT;
    h.length = static_cast<uint32_t>(body.size());
    router_.ClientFrame(c, h, body.data(), body.size());
  }
  static rpc::WorkerOutput Lines(const std::string& job, const std::string& text, bool is_err = false) {
    rpc::WorkerOutput m;
    m.set_job_id(job);
    m.set_source("train");
    m.set_is_err(is_err);
    m.set_text(text);
    return m;
  }
  // The job's stream as [{field: value}], once redis-server has `n` entries (up to 5 s).
  std::vector<std::map<std::string, std::string>> Stream(const std::string& job, size_t n) {
    std::vector<std::map<std::string, std::string>> out;
    auto c = RedisConnection::Open("127.0.0.1", redis_->port(), "", nullptr, 1000);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      io_.run_for(std::chrono::milliseconds(10));
      auto r = c.value()->Command({"XRANGE", std::string(gcs_tables::kOutputPrefix) + ToHex(job), "-", "+"});
      if (!r.ok() || r.value().elements.size() < n) continue;
      for (const auto& entry : r.value().elements) {
        std::map<std::string, std::string> fields;
        const auto& kv = entry.elements[1].elements;
        for (size_t i = 0; i + 1 < kv.size(); i += 2) fields[kv[i].str] = kv[i + 1].str;
        out.push_back(std::move(fields));
      }
      return out;
    }
    return out;
  }

  asio::io_context io_;
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<RedisClient> client_;
  std::unique_ptr<GcsClient> gcs_;
  std::unique_ptr<OutputRelay> relay_;
  Router router_;
  std::vector<int> others_;
};

TEST_F(OutputRelayTest, AWorkersLinesLandInItsJobsStreamWithThePidItRegisteredWith) {
  auto worker = MakeClient(true, 4242);
  Send(worker, Lines("job1", "hello\n"));
  Send(worker, Lines("job1", "oops\n", true));
  auto entries = Stream("job1", 2);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0]["text"], "hello\n");
  EXPECT_EQ(entries[0]["pid"], "4242");
  EXPECT_EQ(entries[0]["ip"], "10.1.2.3");
  EXPECT_EQ(entries[0]["src"], "train");
  EXPECT_EQ(entries[0]["err"], "0");
  EXPECT_EQ(entries[1]["err"], "1");
  EXPECT_TRUE(Stream("job2", 0).empty());  // (another job's stream holds nothing)
}

TEST_F(OutputRelayTest, ADriversOutputIsDroppedAndOversizedMessagesCloseTheConnection) {
  auto driver = MakeClient(false, 1);
  Send(driver, Lines("job1", "not relayed\n"));
  EXPECT_FALSE(driver->conn->closed());
  auto worker = MakeClient(true, 7);
  Send(worker, Lines("job1", std::string(OutputRelay::kMaxText + 1, 'x')));
  EXPECT_TRUE(worker->conn->closed());
  auto other = MakeClient(true, 8);
  Send(other, Lines(std::string(OutputRelay::kMaxJobId + 1, 'j'), "x\n"));
  EXPECT_TRUE(other->conn->closed());
  auto last = MakeClient(true, 9);
  Send(last, Lines("job1", "the only line\n"));
  auto entries = Stream("job1", 1);
  ASSERT_EQ(entries.size(), 1u);  // (nothing of the driver's or the refused ones)
  EXPECT_EQ(entries[0]["text"], "the only line\n");
}

}  // namespace
}  // namespace phalanx::scheduler
