// An actor's callers' sockets read first by the thread waiting on its raylet
// connection (DirectIo with a first reader, BlockingConnection::WatchFirst):
// while that thread sleeps in NextPush the kernel wakes it alone for a call
// (EPOLLEXCLUSIVE) and it reads the call itself; while it is busy the
// DirectIo thread reads instead; frames stay whole and in order whoever
// reads them; a caller's close is reported once.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "core/blocking_connection.h"
#include "core/frame.h"
#include "core/proto/phalanx.pb.h"
#include "worker/direct_io.h"

namespace phalanx {
namespace {

const char kToken[] = "first-reader-token";

std::string MakeFrame(uint64_t id) {
  std::string out(kFrameHeaderSize, '\0');
  FrameHeader h;
  h.length = 4;
  h.type = rpc::DIRECT_CALL;
  h.request_id = id;
  EncodeHeader(h, out.data());
  return out + "call";
}

// A "raylet" end for the worker's BlockingConnection (it never speaks), and
// the actor's DirectIo, whose frames are queued on that connection as a
// worker's TaskServer queues its callers' calls.
class FirstReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/phalanx-first-reader-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::string raylet_path = dir_ + "/raylet.sock";
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, raylet_path.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(::listen(listen_fd_, 4), 0);
    auto conn = BlockingConnection::ConnectUnix(raylet_path, 5000);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    conn_ = std::move(conn.value());
    raylet_fd_ = ::accept(listen_fd_, nullptr, nullptr);
    actor_ = std::make_unique<DirectIo>(
        kToken, nullptr,
        [this](uint64_t, bool, std::vector<Frame>& frames) {
          bool mine = std::this_thread::get_id() == waiter_;
          (mine ? by_waiter_ : by_io_thread_) += static_cast<int>(frames.size());
          conn_->InjectPush(frames);
        },
        [this](uint64_t, const Status&) {
          std::lock_guard<std::mutex> l(mu_);
          ++closed_;
          cv_.notify_all();
        },
        conn_.get());
    ASSERT_TRUE(actor_->ListenUnix(dir_ + "/actor.sock").ok());
    caller_ = std::make_unique<DirectIo>(kToken, nullptr, [](uint64_t, bool, std::vector<Frame>&) {},
                                         [](uint64_t, const Status&) {});
    auto c = caller_->ConnectUnix(dir_ + "/actor.sock", 5000);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    to_actor_ = c.value();
    waiter_ = std::this_thread::get_id();
  }
  void TearDown() override {
    caller_.reset();
    actor_.reset();
    conn_.reset();
    if (raylet_fd_ >= 0) ::close(raylet_fd_);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    std::system(("rm -rf " + dir_).c_str());
  }
  // The next call queued, as the worker's main thread takes it.
  uint64_t Next() {
    auto f = conn_->NextPush(Clock::now() + std::chrono::seconds(5));
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? f.value().header.request_id : ~uint64_t{0};
  }

  std::string dir_;
  int listen_fd_ = -1, raylet_fd_ = -1;
  std::unique_ptr<BlockingConnection> conn_;
  std::unique_ptr<DirectIo> actor_, caller_;
  uint64_t to_actor_ = 0;
  std::thread::id waiter_;
  std::atomic<int> by_waiter_{0}, by_io_thread_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int closed_ = 0;
};

TEST_F(FirstReaderTest, TheWaitingThreadReadsTheCallsItselfAndTheIoThreadSleeps) {
  // One call at a time, each sent once the last was taken: the taker is
  // back in its wait (or about to be) when the next comes.
  constexpr int kCalls = 200;
  std::mutex m;
  std::condition_variable cv;
  int taken = 0;
  std::thread sender([&] {
    for (int i = 0; i < kCalls; ++i) {
      {
        std::unique_lock<std::mutex> l(m);
        cv.wait(l, [&] { return taken == i; });
      }
      ASSERT_TRUE(caller_->Send(to_actor_, MakeFrame(i)).ok());
    }
  });
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(Next(), static_cast<uint64_t>(i));
    std::lock_guard<std::mutex> l(m);
    ++taken;
    cv.notify_all();
  }
  sender.join();
  // Before the first reader, every call was read by the DirectIo thread.
  EXPECT_GT(by_waiter_.load(), kCalls / 4) << "by the waiting thread " << by_waiter_ << ", by the I/O thread "
                                            << by_io_thread_;
  EXPECT_EQ(by_waiter_ + by_io_thread_, kCalls);
}

TEST_F(FirstReaderTest, WhileNobodyWaitsTheIoThreadReadsAndTheCallsStayInOrder) {
  ASSERT_TRUE(caller_->Send(to_actor_, MakeFrame(0)).ok());
  // Nobody waits on the connection: the DirectIo thread must read it.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (by_io_thread_ == 0 && Clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(by_io_thread_, 1);
  EXPECT_EQ(Next(), 0u);
  // A burst, taken while it arrives: whole and in order whoever reads.
  constexpr int kBurst = 3000;
  std::thread sender([&] {
    for (int i = 1; i <= kBurst; ++i) caller_->SendLater(to_actor_, MakeFrame(i));
    caller_->Flush();
  });
  for (int i = 1; i <= kBurst; ++i) ASSERT_EQ(Next(), static_cast<uint64_t>(i));
  sender.join();
  EXPECT_EQ(by_waiter_ + by_io_thread_, kBurst + 1);
}

TEST_F(FirstReaderTest, ACallersCloseIsReportedOnceWhoeverReadsIt) {
  ASSERT_TRUE(caller_->Send(to_actor_, MakeFrame(0)).ok());
  EXPECT_EQ(Next(), 0u);
  caller_->Close(to_actor_);
  std::unique_lock<std::mutex> l(mu_);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (closed_ == 0 && Clock::now() < deadline) {
    l.unlock();
    conn_->Pump(Clock::now() + std::chrono::milliseconds(20));  // (waits as NextPush does, reading what comes)
    l.lock();
  }
  EXPECT_EQ(closed_, 1);
}

}  // namespace
}  // namespace phalanx
