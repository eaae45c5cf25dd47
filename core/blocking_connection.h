// BlockingConnection: the client end of a framed Unix socket, used by drivers
// and workers (the core worker library) to talk to their raylet.
//
// There is no I/O thread. Writers write directly under a mutex. Readers use a
// leader/follower scheme: the first thread that needs a frame becomes the
// reader, reads everything available, files replies by request id and
// unsolicited frames (task pushes) in a queue, and wakes the others. This
// keeps a synchronous call at one wake-up per message instead of two.
// The reader may also be the first to read other sockets of this process
// (WatchFirst: an actor's callers', worker/direct_io.h): the kernel wakes a
// reader sleeping in its wait alone for them, and their other watcher only
// when no reader waits (EPOLLEXCLUSIVE), so an idle worker's main thread
// reads a call itself instead of being woken for it by another thread.
// Thread-safe. Every wait takes a deadline; when the peer dies, every waiter
// gets Unavailable naming the socket.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/adaptive_spin.h"
#include "core/frame.h"
#include "core/frame_reader.h"
#include "core/status.h"

namespace phalanx {

struct Frame {
  FrameHeader header;
  std::string body;
};

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
// A deadline `timeout_ms` from now; negative means none (far future).
Deadline DeadlineAfterMs(int64_t timeout_ms);
// Whole milliseconds left until `deadline`, never negative (0: passed).
int64_t MsLeft(Deadline deadline);

class BlockingConnection {
 public:
  // Connects to the Unix socket at `path`, retrying until `timeout_ms`.
  static Result<std::unique_ptr<BlockingConnection>> ConnectUnix(const std::string& path, int64_t timeout_ms);
  ~BlockingConnection();

  // Writes one frame completely. Thread-safe.
  Status Send(uint16_t type, uint64_t request_id, const google::protobuf::MessageLite& msg);
  Status SendRaw(const std::string& frame);
  // Sends a request and waits for its reply. Thread-safe.
  Result<Frame> Call(uint16_t type, const google::protobuf::MessageLite& msg, Deadline deadline);
  uint64_t NextRequestId();
  // Waits for the reply to `request_id`.
  Result<Frame> WaitReply(uint64_t request_id, Deadline deadline);
  // Waits for the next unsolicited frame (a push from the raylet).
  Result<Frame> NextPush(Deadline deadline);
  // Before any other traffic: sends a request and reads its reply together
  // with the file descriptor attached to it. Returns the frame; *fd receives
  // the descriptor (or -1).
  Result<Frame> CallReceivingFd(uint16_t type, const google::protobuf::MessageLite& msg, int* fd,
                                Deadline deadline);
  // Called (under the connection's lock, by whichever thread is reading) for
  // each unsolicited frame before it is queued; returns true if it consumed
  // the frame. It may edit the queue of frames not yet taken. It must not
  // wait on this connection; it may Send.
  using PushFilter = std::function<bool(const Frame& f, std::deque<Frame>* queued)>;
  void SetPushFilter(PushFilter filter);
  // One read of what arrives by `deadline` (the push filter sees it; nothing
  // is taken). Returns at once while another thread reads: that one passes
  // on what arrives.
  void Pump(Deadline deadline);
  // Whether a pushed frame is waiting to be taken.
  bool HasPush() {
    std::lock_guard<std::mutex> l(mu_);
    return !pushes_.empty();
  }
  // Queues `f` as if the peer had pushed it, waking a NextPush waiter (even
  // one sleeping in epoll_wait). For frames that arrive by another way.
  void InjectPush(std::vector<Frame>& frames);
  // Reads a watched socket for the thread waiting on this connection.
  class SideReader {
   public:
    virtual ~SideReader() = default;
    // Socket `key` has bytes (or closed): read what it has without waiting,
    // and InjectPush what concerns the waiters. Called by the reading thread.
    virtual void Readable(uint64_t key) = 0;
  };
  // Watches `fd` (readable) on the reader's behalf, woken for it in
  // preference to any later watcher that also uses EPOLLEXCLUSIVE; call it
  // before anyone else watches `fd`. `key`: as `reader` knows the socket
  // (never UINT64_MAX or UINT64_MAX - 1). One `reader` per connection.
  Status WatchFirst(int fd, uint64_t key, SideReader* reader);
  void Unwatch(int fd);
  // Stops every waiter with Unavailable and closes the socket.
  void Shutdown(const std::string& why);
  const std::string& peer_name() const { return peer_; }

 private:
  BlockingConnection(int fd, std::string peer);
  template <typename Pred, typename Take>
  Result<Frame> WaitFor(int spin_us, Pred ready, Take take, Deadline deadline);
  // Reads what is available (polling for `spin_us` before sleeping, waiting
  // up to `deadline`) and parses whole frames into `out`.
  Status ReadSome(Deadline deadline, int spin_us, std::vector<Frame>* out);
  // Files frames just read: replies by request id, pushes through the filter.
  void DeliverLocked(std::vector<Frame>& frames, const Status& st);
  Status ReadExact(char* dst, size_t n, Deadline deadline);

  int fd_;
  int wake_fd_;  // an eventfd the reader waits on beside fd_ (InjectPush)
  int epoll_fd_;  // the reader's wait: fd_, wake_fd_, the watched sockets
  std::atomic<SideReader*> side_{nullptr};
  std::string peer_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool reading_ = false;                       // guarded by mu_
  std::thread::id reading_thread_;             // the thread reading while reading_; guarded by mu_
  Status status_;                              // guarded by mu_; non-OK once dead
  std::unordered_map<uint64_t, Frame> replies_;  // guarded by mu_
  std::deque<Frame> pushes_;                   // guarded by mu_
  PushFilter push_filter_;                     // guarded by mu_
  uint64_t next_request_id_ = 1;               // guarded by mu_
  FrameReader reader_;                         // touched only by the current reader
  AdaptiveSpin reply_spin_;                    // WaitReply's
};

}  // namespace phalanx
