// The FunctionTable alone, over a real redis-server: a function registered
// on one node is answered on another from the GCS (and then from its own
// table), one never registered is answered with NotFound once the table
// stops asking, and Republish writes every function kept again (after a
// GCS outage). Requests come through a Router over a socket pair; the
// replies are read from its other end.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include "core/frame_reader.h"
#include "gcs/gcs_client.h"
#include "gcs/gcs_tables.h"
#include "scheduler/function_table.h"
#include "tests/cpp/test_util.h"

namespace phalanx::scheduler {
namespace {

namespace asio = boost::asio;

class FunctionTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>();
    client_ = std::make_unique<RedisClient>(io_, "127.0.0.1", redis_->port());
    ASSERT_TRUE(client_->Connect(2000).ok());
    gcs_ = std::make_unique<GcsClient>(client_.get());
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    FramedConnection::Socket s(io_);
    s.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), fds[0]);
    auto conn = std::make_shared<FramedConnection>(std::move(s), "test client");
    conn->Start([](const FrameHeader&, const char*, size_t) {}, [](const Status&) {});
    other_ = fds[1];
    client_rec_ = std::make_shared<Client>();
    client_rec_->conn = conn;
    client_rec_->registered = true;
  }
  void TearDown() override { ::close(other_); }

  void Send(Router& router, uint16_t type, uint64_t req, const google::protobuf::MessageLite& m) {
    std::string body = m.SerializeAsString();
    FrameHeader h;
    h.type = type;
    h.request_id = req;
    h.length = static_cast<uint32_t>(body.size());
    router.ClientFrame(client_rec_, h, body.data(), body.size());
  }
  // Runs the loop until the reply to a GET_FUNCTION arrives on the other end (up to 10 s).
  rpc::GetFunctionReply Reply() {
    rpc::GetFunctionReply r;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      io_.run_for(std::chrono::milliseconds(10));
      char buf[4096];
      ssize_t n = ::recv(other_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) continue;
      got_.append(buf, static_cast<size_t>(n));
      if (got_.size() < kFrameHeaderSize) continue;
      FrameHeader h = DecodeHeader(got_.data());
      if (got_.size() < kFrameHeaderSize + h.length) continue;
      EXPECT_EQ(h.type, rpc::GET_FUNCTION);
      EXPECT_TRUE(r.ParseFromArray(got_.data() + kFrameHeaderSize, static_cast<int>(h.length)));
      got_.erase(0, kFrameHeaderSize + h.length);
      return r;
    }
    ADD_FAILURE() << "no reply";
    return r;
  }
  rpc::RegisterFunction Fn(const std::string& id) {
    rpc::RegisterFunction m;
    m.set_function_id(id);
    m.set_name("f_" + id);
    m.set_pickled("code of " + id);
    return m;
  }

  asio::io_context io_;
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<RedisClient> client_;
  std::unique_ptr<GcsClient> gcs_;
  std::shared_ptr<Client> client_rec_;
  int other_ = -1;
  std::string got_;
};

TEST_F(FunctionTableTest, AFunctionRegisteredOnOneNodeIsAnsweredOnAnother) {
  FunctionTable here(io_, gcs_.get()), there(io_, gcs_.get());
  Router here_routes, there_routes;
  here.AddRoutes(here_routes);
  there.AddRoutes(there_routes);
  Send(here_routes, rpc::REGISTER_FUNCTION, 0, Fn("f1"));
  rpc::GetFunction ask;
  ask.set_function_id("f1");
  Send(there_routes, rpc::GET_FUNCTION, 7, ask);  // (from the GCS, asked again until it is there)
  rpc::GetFunctionReply r = Reply();
  EXPECT_EQ(r.status().code(), 0) << r.status().message();
  EXPECT_EQ(r.name(), "f_f1");
  EXPECT_EQ(r.pickled(), "code of f1");
  Send(here_routes, rpc::GET_FUNCTION, 8, ask);  // (from its own table)
  EXPECT_EQ(Reply().pickled(), "code of f1");
}

TEST_F(FunctionTableTest, RepublishWritesEveryFunctionKeptAgain) {
  FunctionTable table(io_, gcs_.get());
  Router routes;
  table.AddRoutes(routes);
  Send(routes, rpc::REGISTER_FUNCTION, 0, Fn("a"));
  Send(routes, rpc::REGISTER_FUNCTION, 0, Fn("b"));
  io_.run_for(std::chrono::milliseconds(50));
  auto hlen = [&] {
    auto c = RedisConnection::Open("127.0.0.1", redis_->port(), "", nullptr, 1000);
    auto r = c.value()->Command({"HLEN", gcs_tables::kFunctions});
    return r.ok() ? r.value().integer : -1;
  };
  EXPECT_EQ(hlen(), 2);
  auto c = RedisConnection::Open("127.0.0.1", redis_->port(), "", nullptr, 1000);
  ASSERT_TRUE(c.value()->Command({"DEL", gcs_tables::kFunctions}).ok());  // (a server that lost its writes)
  EXPECT_EQ(table.Republish(), 2u);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (hlen() != 2 && std::chrono::steady_clock::now() < until) io_.run_for(std::chrono::milliseconds(10));
  EXPECT_EQ(hlen(), 2);
}

TEST_F(FunctionTableTest, AFunctionNobodyRegisteredIsNotFoundOnceTheTableStopsAsking) {
  FunctionTable table(io_, gcs_.get());
  Router routes;
  table.AddRoutes(routes);
  table.Stop();  // (a stopped table asks the GCS once, not for seconds)
  rpc::GetFunction ask;
  ask.set_function_id("nobody");
  Send(routes, rpc::GET_FUNCTION, 3, ask);
  rpc::GetFunctionReply r = Reply();
  EXPECT_EQ(r.status().code(), static_cast<int>(StatusCode::kNotFound));
  EXPECT_NE(r.status().message().find("never registered"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace phalanx::scheduler
