// The Router alone: client and peer frames over real socket pairs reach the
// route of their type with their body; an unregistered client, an unknown
// type and a malformed message close the connection; a peer's reply goes
// back on its connection as a reply to its request.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include "core/framed_connection.h"
#include "core/proto/phalanx.pb.h"
#include "scheduler/router.h"

namespace phalanx::scheduler {
namespace {

namespace asio = boost::asio;

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    FramedConnection::Socket s(io_);
    s.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), fds[0]);
    conn_ = std::make_shared<FramedConnection>(std::move(s), "test peer");
    conn_->Start([](const FrameHeader&, const char*, size_t) {}, [this](const Status&) { closed_ = true; });
    other_ = fds[1];
    client_ = std::make_shared<Client>();
    client_->conn = conn_;
  }
  void TearDown() override { ::close(other_); }
  // Runs the loop until the connection wrote what it queued.
  void Drain() {
    for (int i = 0; i < 100 && conn_->queued_bytes() > 0; ++i) io_.run_for(std::chrono::milliseconds(10));
    io_.poll();
  }
  FrameHeader Header(uint16_t type, uint64_t request_id, size_t len) {
    FrameHeader h;
    h.type = type;
    h.request_id = request_id;
    h.length = static_cast<uint32_t>(len);
    return h;
  }

  asio::io_context io_;
  std::shared_ptr<FramedConnection> conn_;
  std::shared_ptr<Client> client_;
  int other_ = -1;
  bool closed_ = false;
  Router router_;
};

TEST_F(RouterTest, AClientFrameReachesItsRouteWithItsBodyAndRequest) {
  std::string seen;
  uint64_t seen_req = 0;
  router_.OnClient(rpc::GET_STATS, "stats", [&](const std::shared_ptr<Client>& c, uint64_t req, const char* b,
                                                size_t n) {
    EXPECT_EQ(c, client_);
    seen.assign(b, n);
    seen_req = req;
    return true;
  });
  client_->registered = true;
  router_.ClientFrame(client_, Header(rpc::GET_STATS, 7, 3), "abc", 3);
  EXPECT_EQ(seen, "abc");
  EXPECT_EQ(seen_req, 7u);
  EXPECT_FALSE(conn_->closed());
}

TEST_F(RouterTest, NothingButRegistrationIsReadFromAClientThatHasNotRegistered) {
  bool ran = false;
  router_.OnClient(rpc::GET_STATS, "stats", [&](const std::shared_ptr<Client>&, uint64_t, const char*, size_t) {
    ran = true;
    return true;
  });
  router_.ClientFrame(client_, Header(rpc::GET_STATS, 1, 0), "", 0);
  EXPECT_FALSE(ran);
  EXPECT_TRUE(conn_->closed());
}

TEST_F(RouterTest, AnUnroutedTypeAndAMalformedMessageCloseTheConnection) {
  client_->registered = true;
  router_.ClientFrame(client_, Header(rpc::GET_STATS, 1, 0), "", 0);  // nobody routes it
  EXPECT_TRUE(conn_->closed());
  SetUp();  // a fresh connection
  client_->registered = true;
  router_.OnClient(rpc::SUBMIT_TASK, "task", [](const std::shared_ptr<Client>&, uint64_t, const char*, size_t) {
    return false;  // (malformed)
  });
  router_.ClientFrame(client_, Header(rpc::SUBMIT_TASK, 1, 0), "", 0);
  EXPECT_TRUE(conn_->closed());
}

TEST_F(RouterTest, APeersReplyGoesBackAsTheReplyToItsRequest) {
  router_.OnPeer(rpc::CANCEL_TASK, "cancel", [](const char*, size_t, const PeerReply& reply) {
    rpc::Status st;
    st.set_message("done");
    reply(st);
    return true;
  });
  router_.PeerFrame(conn_, Header(rpc::CANCEL_TASK, 42, 0), "", 0);
  Drain();
  char buf[256];
  ssize_t n = ::recv(other_, buf, sizeof(buf), MSG_DONTWAIT);
  ASSERT_GE(n, static_cast<ssize_t>(kFrameHeaderSize));
  FrameHeader h = DecodeHeader(buf);
  EXPECT_EQ(h.type, rpc::CANCEL_TASK);
  EXPECT_EQ(h.flags, kReplyFlag);
  EXPECT_EQ(h.request_id, 42u);
  rpc::Status st;
  ASSERT_TRUE(st.ParseFromArray(buf + kFrameHeaderSize, static_cast<int>(h.length)));
  EXPECT_EQ(st.message(), "done");
}

TEST_F(RouterTest, APeerMessageNobodyRoutesClosesTheConnection) {
  router_.OnClient(rpc::CANCEL_TASK, "cancel", [](const std::shared_ptr<Client>&, uint64_t, const char*, size_t) {
    return true;  // (a client route: peers have their own table)
  });
  router_.PeerFrame(conn_, Header(rpc::CANCEL_TASK, 1, 0), "", 0);
  EXPECT_TRUE(conn_->closed());
}

TEST(RouterDeathTest, ATypeHasOneOwner) {
  Router router;
  router.OnPeer(rpc::PULL_OBJECT, "pull", [](const char*, size_t, const PeerReply&) { return true; });
  EXPECT_DEATH(router.OnPeer(rpc::PULL_OBJECT, "pull", [](const char*, size_t, const PeerReply&) { return true; }),
               "");
}

}  // namespace
}  // namespace phalanx::scheduler
