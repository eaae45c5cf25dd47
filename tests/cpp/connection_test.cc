// FramedConnection (the raylet's side) against BlockingConnection (the
// client's side) over a real Unix socket.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <thread>

#include "core/blocking_connection.h"
#include "core/framed_connection.h"
#include "core/proto/phalanx.pb.h"
#include "tests/cpp/test_util.h"

namespace phalanx {

namespace asio = boost::asio;

// An echo server on its own io_context thread: replies to GET_STATS, pushes a
// PUSH_TASK after each SEAL_OBJECT, and closes on CREATE_OBJECT.
class EchoServer {
 public:
  explicit EchoServer(const std::string& path) : acceptor_(io_, asio::local::stream_protocol::endpoint(path)) {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~EchoServer() {
    io_.stop();
    thread_.join();
  }
  std::atomic<int> malformed{0};

 private:
  void Accept() {
    acceptor_.async_accept([this](auto ec, asio::local::stream_protocol::socket s) {
      if (ec) return;
      FramedConnection::Socket g(io_);
      g.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), s.release());
      auto c = std::make_shared<FramedConnection>(std::move(g), "test client");
      conns_.push_back(c);
      std::weak_ptr<FramedConnection> w = c;
      c->Start(
          [this, w](const FrameHeader& h, const char*, size_t) {
            auto c = w.lock();
            if (h.type == rpc::GET_STATS) c->Send(rpc::GET_STATS, kReplyFlag, h.request_id, rpc::StatsReply());
            if (h.type == rpc::SEAL_OBJECT) c->Send(rpc::PUSH_TASK, 0, 0, rpc::PushTask());
            if (h.type == rpc::CREATE_OBJECT) c->Close();
          },
          [this](const Status& why) {
            if (why.code() == StatusCode::kInvalidArgument) ++malformed;
          });
      Accept();
    });
  }
  asio::io_context io_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::vector<std::shared_ptr<FramedConnection>> conns_;
  std::thread thread_;
};

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir("phalanx-conn");
    path_ = dir_ + "/s.sock";
    server_ = std::make_unique<EchoServer>(path_);
    auto c = BlockingConnection::ConnectUnix(path_, 2000);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    conn_ = std::move(c).value();
  }
  std::string dir_, path_;
  std::unique_ptr<EchoServer> server_;
  std::unique_ptr<BlockingConnection> conn_;
};

TEST_F(ConnectionTest, RepliesReachTheirCallersAcrossThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto r = conn_->Call(rpc::GET_STATS, rpc::Empty(), DeadlineAfterMs(5000));
        if (r.ok() && (r.value().header.flags & kReplyFlag)) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 800);
}

TEST_F(ConnectionTest, PushesAreQueuedSeparatelyFromReplies) {
  ASSERT_TRUE(conn_->Send(rpc::SEAL_OBJECT, 0, rpc::SealObject()).ok());
  ASSERT_TRUE(conn_->Call(rpc::GET_STATS, rpc::Empty(), DeadlineAfterMs(5000)).ok());
  auto push = conn_->NextPush(DeadlineAfterMs(5000));
  ASSERT_TRUE(push.ok());
  EXPECT_EQ(push.value().header.type, rpc::PUSH_TASK);
}

TEST_F(ConnectionTest, WaitingPastDeadlineTimesOut) {
  auto t0 = Clock::now();
  auto r = conn_->NextPush(DeadlineAfterMs(100));
  EXPECT_EQ(r.status().code(), StatusCode::kTimedOut);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(ConnectionTest, PeerClosingWakesEveryWaiterWithUnavailable) {
  std::thread waiter([&] {
    auto r = conn_->NextPush(DeadlineAfterMs(10000));
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  });
  ASSERT_TRUE(conn_->Send(rpc::CREATE_OBJECT, 0, rpc::CreateObject()).ok());
  auto r = conn_->Call(rpc::GET_STATS, rpc::Empty(), DeadlineAfterMs(10000));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("raylet at"), std::string::npos);
  waiter.join();
}

TEST_F(ConnectionTest, MalformedFrameClosesOnlyThatConnection) {
  std::string garbage(16, '\xff');  // length 4 GiB, unknown type
  ASSERT_TRUE(conn_->SendRaw(garbage).ok());
  auto r = conn_->Call(rpc::GET_STATS, rpc::Empty(), DeadlineAfterMs(5000));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  auto other = BlockingConnection::ConnectUnix(path_, 2000);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other.value()->Call(rpc::GET_STATS, rpc::Empty(), DeadlineAfterMs(5000)).ok());
  EXPECT_EQ(server_->malformed.load(), 1);
}

TEST(ConnectionConnectTest, NoServerIsUnavailableNamingThePath) {
  auto r = BlockingConnection::ConnectUnix("/tmp/phalanx-no-such.sock", 100);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("/tmp/phalanx-no-such.sock"), std::string::npos);
}

}  // namespace phalanx
