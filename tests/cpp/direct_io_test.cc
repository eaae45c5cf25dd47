// DirectIo (worker/direct_io.h) over TCP on loopback, plain and TLS: frames
// both ways, a large one, many small ones in order, and a caller of another
// cluster refused before anything it sends is handed on; an idle poll thread
// sleeps once a blocked write drained.
#include "worker/direct_io.h"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/frame.h"
#include "core/proto/phalanx.pb.h"

namespace phalanx {
namespace {

const char kToken[] = "direct-test-token";

// Collects what one DirectIo hands to its handlers.
struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<uint64_t, Frame>> frames;
  int closed = 0;
  DirectIo::FrameHandler on_frames() {
    return [this](uint64_t conn, bool, std::vector<Frame>& f) {
      std::lock_guard<std::mutex> l(mu);
      for (auto& x : f) frames.emplace_back(conn, std::move(x));
      cv.notify_all();
    };
  }
  DirectIo::CloseHandler on_close() {
    return [this](uint64_t, const Status&) {
      std::lock_guard<std::mutex> l(mu);
      ++closed;
      cv.notify_all();
    };
  }
  bool WaitFor(size_t n, int ms = 5000) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::milliseconds(ms), [&] { return frames.size() >= n; });
  }
};

std::string Frame(uint16_t type, uint64_t id, const std::string& body) {
  std::string out(kFrameHeaderSize, '\0');
  FrameHeader h;
  h.length = static_cast<uint32_t>(body.size());
  h.type = type;
  h.request_id = id;
  EncodeHeader(h, out.data());
  return out + body;
}

std::shared_ptr<const TlsContext> TlsFor(bool on, const std::string& token) {
  if (!on) return nullptr;
  auto c = TlsContext::Create(token);
  EXPECT_TRUE(c.ok());
  return c.value();
}

class DirectIoTest : public ::testing::TestWithParam<bool> {};

TEST_P(DirectIoTest, FramesCrossBothWaysWholeAndInOrder) {
  Sink server_sink, client_sink;
  DirectIo server(kToken, TlsFor(GetParam(), kToken), server_sink.on_frames(), server_sink.on_close());
  DirectIo client(kToken, TlsFor(GetParam(), kToken), client_sink.on_frames(), client_sink.on_close());
  auto port = server.ListenTcp("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  auto conn = client.ConnectTcp("127.0.0.1", port.value(), 5000);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();

  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13 + 1);
  for (uint64_t i = 0; i < 200; ++i) client.SendLater(conn.value(), Frame(rpc::DIRECT_CALL, i, "call"));
  ASSERT_TRUE(client.Send(conn.value(), Frame(rpc::DIRECT_CALL, 200, big)).ok());
  ASSERT_TRUE(server_sink.WaitFor(201));
  {
    std::lock_guard<std::mutex> l(server_sink.mu);
    for (uint64_t i = 0; i < 201; ++i) EXPECT_EQ(server_sink.frames[i].second.header.request_id, i);
    EXPECT_EQ(server_sink.frames[200].second.body, big);
  }
  uint64_t back = server_sink.frames[0].first;
  ASSERT_TRUE(server.Send(back, Frame(rpc::DIRECT_CALL, 7, big)).ok());
  ASSERT_TRUE(client_sink.WaitFor(1));
  std::lock_guard<std::mutex> l(client_sink.mu);
  EXPECT_EQ(client_sink.frames[0].second.body, big);
}

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

TEST_P(DirectIoTest, OnceABlockedWriteDrainsThePollThreadSleeps) {
  // A write larger than the socket takes waits for EPOLLOUT; once it is
  // out, nothing may keep waking the poll thread (a stale EPOLLOUT watch
  // spun it at 100% CPU).
  Sink server_sink, client_sink;
  DirectIo server(kToken, TlsFor(GetParam(), kToken), server_sink.on_frames(), server_sink.on_close());
  DirectIo client(kToken, TlsFor(GetParam(), kToken), client_sink.on_frames(), client_sink.on_close());
  auto port = server.ListenTcp("127.0.0.1");
  ASSERT_TRUE(port.ok());
  auto conn = client.ConnectTcp("127.0.0.1", port.value(), 5000);
  ASSERT_TRUE(conn.ok());
  std::string big(16 << 20, 'b');
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(client.Send(conn.value(), Frame(rpc::DIRECT_CALL, i, big)).ok());
  ASSERT_TRUE(server_sink.WaitFor(4, 20000));
  double before = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // (a window of idleness, measured)
  EXPECT_LT(CpuSeconds() - before, 0.1) << "the process spent CPU while idle";
}

TEST_P(DirectIoTest, ACallerOfAnotherClusterIsRefusedAndHandsOnNothing) {
  Sink server_sink, client_sink;
  DirectIo server(kToken, TlsFor(GetParam(), kToken), server_sink.on_frames(), server_sink.on_close());
  DirectIo client("another-token", TlsFor(GetParam(), "another-token"), client_sink.on_frames(),
                  client_sink.on_close());
  auto port = server.ListenTcp("127.0.0.1");
  ASSERT_TRUE(port.ok());
  auto conn = client.ConnectTcp("127.0.0.1", port.value(), 3000);
  ASSERT_FALSE(conn.ok());
  EXPECT_NE(conn.status().message().find("token"), std::string::npos) << conn.status().ToString();
  EXPECT_FALSE(server_sink.WaitFor(1, 300));
}

TEST(DirectIoTlsTest, PlainAndTlsEndsDoNotTalk) {
  Sink server_sink, client_sink;
  DirectIo server(kToken, TlsFor(true, kToken), server_sink.on_frames(), server_sink.on_close());
  DirectIo client(kToken, nullptr, client_sink.on_frames(), client_sink.on_close());
  auto port = server.ListenTcp("127.0.0.1");
  ASSERT_TRUE(port.ok());
  auto conn = client.ConnectTcp("127.0.0.1", port.value(), 3000);
  ASSERT_FALSE(conn.ok());
  EXPECT_NE(conn.status().message().find("--tls"), std::string::npos) << conn.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(PlainAndTls, DirectIoTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tls" : "Plain"; });

}  // namespace
}  // namespace phalanx
