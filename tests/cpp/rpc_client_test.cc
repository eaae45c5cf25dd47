// RpcClient over real TCP on loopback: replies, timeouts, pushes, peer death;
// each test runs over plain TCP and over TLS (core/tls.h).
#include "core/rpc_client.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "core/proto/phalanx.pb.h"

namespace phalanx {

namespace asio = boost::asio;
const char kTestToken[] = "test-token";

// A TCP server on the test's io_context: answers GET_STATS, ignores
// GET_FUNCTION (so calls time out), pushes a PUSH_TASK on SEAL_OBJECT,
// closes on CREATE_OBJECT and answers PULL_OBJECT with a large frame whose
// body is written from `big` (OutFrame tail), counting the released keeps.
class TcpServer {
 public:
  TcpServer(asio::io_context& io, std::shared_ptr<const TlsContext> tls)
      : io_(io), tls_(std::move(tls)), acceptor_(io, {asio::ip::make_address("127.0.0.1"), 0}) {
    big.resize(300 << 10);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
    Accept();
  }
  int port() const { return acceptor_.local_endpoint().port(); }
  std::string big;
  int keeps_released = 0;
  int frames = 0;  // handed to the handler (only after a peer authenticated)

 private:
  void Accept() {
    acceptor_.async_accept([this](auto ec, asio::ip::tcp::socket s) {
      if (ec) return;
      FramedConnection::Socket g(io_);
      g.assign(asio::generic::stream_protocol(AF_INET, SOCK_STREAM), s.release());
      auto c = std::make_shared<FramedConnection>(std::move(g), "server side");
      c->RequireAuth(Handshake::Role::kServer, kTestToken, "127.0.0.1", /*timeout_ms=*/300);
      if (tls_) c->UseTls(tls_);
      conns_.push_back(c);
      FramedConnection* raw = c.get();
      c->Start(
          [this, raw](const FrameHeader& h, const char*, size_t) {
            ++frames;
            if (h.type == rpc::GET_STATS) {
              rpc::StatsReply r;
              r.set_workers(7);
              raw->Send(rpc::GET_STATS, kReplyFlag, h.request_id, r);
            }
            if (h.type == rpc::SEAL_OBJECT) raw->Send(rpc::PUSH_TASK, 0, 0, rpc::PushTask());
            if (h.type == rpc::CREATE_OBJECT) raw->Close();
            if (h.type == rpc::PULL_OBJECT) {
              // Body: the request id as 8 bytes, then `big` from its own memory.
              OutFrame f;
              FrameHeader rh{static_cast<uint32_t>(8 + big.size()), rpc::PULL_OBJECT, kReplyFlag, h.request_id};
              f.bytes.resize(kFrameHeaderSize + 8);
              EncodeHeader(rh, f.bytes.data());
              std::memcpy(f.bytes.data() + kFrameHeaderSize, &h.request_id, 8);
              f.tail = big.data();
              f.tail_len = big.size();
              f.keep = std::shared_ptr<const void>(nullptr, [this](const void*) { ++keeps_released; });
              raw->Send(std::move(f));
            }
          },
          [](const Status&) {});
      Accept();
    });
  }
  asio::io_context& io_;
  std::shared_ptr<const TlsContext> tls_;
  asio::ip::tcp::acceptor acceptor_;
  std::vector<std::shared_ptr<FramedConnection>> conns_;
};

// The TLS context for `token` when the test runs over TLS, else null.
std::shared_ptr<const TlsContext> TlsFor(bool tls, const std::string& token) {
  if (!tls) return nullptr;
  auto c = TlsContext::Create(token);
  EXPECT_TRUE(c.ok());
  return c.value();
}

class RpcClientTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<TcpServer>(io_, TlsFor(GetParam(), kTestToken));
    bool done = false;
    RpcClient::ConnectTcp(io_, "127.0.0.1", server_->port(), 2000, kTestToken, TlsFor(GetParam(), kTestToken), [&](Result<std::shared_ptr<RpcClient>> r) {
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      client_ = r.value();
      done = true;
    });
    Run([&] { return done; });
    client_->Start([this](const FrameHeader& h, const char*, size_t) { pushes_.push_back(h.type); });
  }
  void Run(const std::function<bool()>& until) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!until() && std::chrono::steady_clock::now() < deadline) io_.run_for(std::chrono::milliseconds(5));
  }
  asio::io_context io_;
  std::unique_ptr<TcpServer> server_;
  std::shared_ptr<RpcClient> client_;
  std::vector<uint16_t> pushes_;
};

TEST_P(RpcClientTest, ManyCallsEachGetTheirReply) {
  int ok = 0;
  for (int i = 0; i < 100; ++i) {
    client_->Call(rpc::GET_STATS, rpc::Empty(), 2000, [&](Result<std::string> r) {
      rpc::StatsReply s;
      if (r.ok() && s.ParseFromString(r.value()) && s.workers() == 7) ++ok;
    });
  }
  Run([&] { return ok == 100; });
  EXPECT_EQ(ok, 100);
  EXPECT_EQ(client_->pending(), 0u);
}

TEST_P(RpcClientTest, LargeRepliesWrittenFromForeignMemoryArriveWholeAndInOrder) {
  // Large frames mixed with small ones: each large body is read in place
  // (CallView) and must be byte-exact; every keep is released once written.
  int good = 0, small = 0;
  const int kLarge = 20;
  for (int i = 0; i < kLarge; ++i) {
    client_->CallView(rpc::PULL_OBJECT, rpc::PullObject(), 5000, [&](const Status& st, const char* body, size_t len) {
      if (!st.ok() || len != 8 + server_->big.size()) return;
      if (std::memcmp(body + 8, server_->big.data(), server_->big.size()) == 0) ++good;
    });
    client_->Call(rpc::GET_STATS, rpc::Empty(), 5000, [&](Result<std::string> r) { small += r.ok(); });
  }
  Run([&] { return good + small == 2 * kLarge && server_->keeps_released == kLarge; });
  EXPECT_EQ(good, kLarge);
  EXPECT_EQ(small, kLarge);
  EXPECT_EQ(server_->keeps_released, kLarge);
}

TEST_P(RpcClientTest, UnansweredCallTimesOutNamingThePeer) {
  Status st;
  bool done = false;
  client_->Call(rpc::GET_FUNCTION, rpc::GetFunction(), 100, [&](Result<std::string> r) {
    st = r.status();
    done = true;
  });
  Run([&] { return done; });
  EXPECT_EQ(st.code(), StatusCode::kTimedOut);
  EXPECT_NE(st.message().find("127.0.0.1:" + std::to_string(server_->port())), std::string::npos);
}

TEST_P(RpcClientTest, PushesReachThePushHandler) {
  client_->Call(rpc::SEAL_OBJECT, rpc::SealObject(), -1, [](Result<std::string>) {});
  Run([&] { return !pushes_.empty(); });
  ASSERT_EQ(pushes_.size(), 1u);
  EXPECT_EQ(pushes_[0], rpc::PUSH_TASK);
}

TEST_P(RpcClientTest, PeerClosingFailsEveryPendingCallOnce) {
  int failed = 0;
  for (int i = 0; i < 3; ++i) {
    client_->Call(rpc::GET_FUNCTION, rpc::GetFunction(), 10000, [&](Result<std::string> r) {
      if (r.status().code() == StatusCode::kUnavailable) ++failed;
    });
  }
  client_->Call(rpc::CREATE_OBJECT, rpc::CreateObject(), 10000, [&](Result<std::string> r) {
    if (r.status().code() == StatusCode::kUnavailable) ++failed;
  });
  Run([&] { return failed == 4; });
  EXPECT_EQ(failed, 4);
  bool after = false;
  client_->Call(rpc::GET_STATS, rpc::Empty(), 1000, [&](Result<std::string> r) {
    after = r.status().code() == StatusCode::kUnavailable;
  });
  Run([&] { return after; });
  EXPECT_TRUE(after);
}

TEST(RpcClientConnectTest, NothingListeningIsUnavailable) {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  int port = a.local_endpoint().port();
  a.close();
  Status st;
  bool done = false;
  RpcClient::ConnectTcp(io, "127.0.0.1", port, 1000, kTestToken, nullptr, [&](Result<std::shared_ptr<RpcClient>> r) {
    st = r.status();
    done = true;
  });
  while (!done) io.run_for(std::chrono::milliseconds(10));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
}

// A plain blocking TCP socket to the server: what an attacker has.
int RawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Runs `io` on a thread while `body` talks to the server through blocking sockets.
void WithLoop(asio::io_context& io, const std::function<void()>& body) {
  auto guard = asio::make_work_guard(io);
  std::thread t([&] { io.run(); });
  body();
  guard.reset();
  io.stop();
  t.join();
}

TEST_P(RpcClientTest, AClientWithAnotherTokenIsRefusedAndNothingItSendsIsHandled) {
  int before = server_->frames;
  std::shared_ptr<RpcClient> wrong;
  bool connected = false;
  RpcClient::ConnectTcp(io_, "127.0.0.1", server_->port(), 2000, "another-token", TlsFor(GetParam(), "another-token"), [&](auto r) {
    ASSERT_TRUE(r.ok());
    wrong = r.value();
    connected = true;
  });
  Run([&] { return connected; });
  wrong->Start();
  Status st;
  bool done = false;
  wrong->Call(rpc::GET_STATS, rpc::Empty(), 2000, [&](Result<std::string> r) {
    st = r.status();
    done = true;
  });
  Run([&] { return done; });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("token"), std::string::npos) << st.ToString();
  EXPECT_EQ(server_->frames, before);
}

TEST_P(RpcClientTest, AFrameBeforeTheHandshakeClosesTheConnectionUnread) {
  int before = server_->frames;
  WithLoop(io_, [&] {
    // A kill, a pull, a forwarded task, a stats call: none is read without the handshake.
    for (uint16_t type : {rpc::KILL_ACTOR, rpc::PULL_OBJECT, rpc::FORWARD_TASK, rpc::GET_STATS}) {
      int fd = RawConnect(server_->port());
      std::string f = EncodeFrame(type, 0, 1, rpc::Empty());
      ASSERT_EQ(::send(fd, f.data(), f.size(), MSG_NOSIGNAL), static_cast<ssize_t>(f.size()));
      char buf[64];
      EXPECT_EQ(::recv(fd, buf, sizeof(buf), 0), 0) << "type " << type;  // closed, nothing answered
      ::close(fd);
    }
  });
  EXPECT_EQ(server_->frames, before);
}

TEST_P(RpcClientTest, APeerThatDoesNotAuthenticateIsClosedAfterTheDeadline) {
  WithLoop(io_, [&] {
    int fd = RawConnect(server_->port());
    auto start = std::chrono::steady_clock::now();
    char buf[64];
    EXPECT_EQ(::recv(fd, buf, sizeof(buf), 0), 0);  // the server's 300 ms ran out
    auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_GE(waited, std::chrono::milliseconds(250));
    EXPECT_LT(waited, std::chrono::seconds(4));
    ::close(fd);
  });
}

TEST_P(RpcClientTest, AHeaderDeclaringAGibibyteAllocatesNothing) {
  WithLoop(io_, [&] {
    std::vector<int> fds;
    for (int i = 0; i < 50; ++i) {
      int fd = RawConnect(server_->port());
      char header[kFrameHeaderSize];
      EncodeHeader(FrameHeader{1u << 30, rpc::FORWARD_TASK, 0, 1}, header);
      ASSERT_EQ(::send(fd, header, sizeof(header), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(header)));
      fds.push_back(fd);
    }
    for (int fd : fds) {
      char buf[64];
      EXPECT_EQ(::recv(fd, buf, sizeof(buf), 0), 0);  // refused at the header
      ::close(fd);
    }
  });
  EXPECT_EQ(FrameReader::ProcessCharged(), 0u);
}

INSTANTIATE_TEST_SUITE_P(PlainAndTls, RpcClientTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tls" : "Plain"; });

}  // namespace phalanx
