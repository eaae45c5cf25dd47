// RayletChannel: a worker process's connection to its node's raylet, as the
// core worker's parts use it. One-way messages are batched: Send queues a
// message (written within ~200 us, at 64 KiB, or before the next request);
// SendNow writes the queue at once. Every batch starts with the reference
// changes recorded since the last one (PendingChanges, given at
// construction), so the raylet learns of a hold before any message that
// could depend on it. A thread of its own writes what waits: messages
// after ~200 us, reference changes and lazy messages (SendLazy) alone after
// ~5 ms (Nudge); a message that comes while they wait cuts the wait short.
// Call waits for the reply in slices, checking the interrupt (a pending
// KeyboardInterrupt) between them, and gives up grace_ms past the request's
// own timeout, naming the raylet.
// Thread-safe. Lock order: the channel's lock before PendingChanges'.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/blocking_connection.h"
#include "core/status.h"
#include "worker/ref_counter.h"

namespace phalanx {

class RayletChannel {
 public:
  using InterruptCheck = std::function<Status()>;

  // `grace_ms`: how long past a request's own timeout to wait for the raylet
  // before declaring it unresponsive.
  RayletChannel(std::unique_ptr<BlockingConnection> conn, PendingChanges* pending, int64_t grace_ms);
  ~RayletChannel();
  RayletChannel(const RayletChannel&) = delete;
  RayletChannel& operator=(const RayletChannel&) = delete;

  void SetInterruptCheck(InterruptCheck check) { interrupt_ = std::move(check); }
  const InterruptCheck& interrupt() const { return interrupt_; }

  Status Send(uint16_t type, const google::protobuf::MessageLite& m);
  // A message nobody waits for: it goes with the next batch, within ~5 ms
  // (a request, Send, SendNow or Flush takes it sooner, in order).
  Status SendLazy(uint16_t type, const google::protobuf::MessageLite& m);
  Status SendNow(uint16_t type, const google::protobuf::MessageLite& m);
  // Writes the pending changes and the queue now.
  Status Flush();
  // Pending changes wait: the thread writes them soon.
  void Nudge();
  Result<Frame> Call(uint16_t type, const google::protobuf::MessageLite& m, int64_t timeout_ms);
  // Call, with the reply parsed as `Reply` ("malformed <what> reply" if it is not one).
  template <typename Reply>
  Result<Reply> CallFor(uint16_t type, const google::protobuf::MessageLite& m, int64_t timeout_ms, const char* what) {
    PHALANX_ASSIGN_OR_RETURN(Frame f, Call(type, m, timeout_ms));
    Reply r;
    if (!r.ParseFromString(f.body)) return Status::Internal(std::string("malformed ") + what + " reply");
    return r;
  }
  // The connection itself: pushes from the raylet (NextPush, InjectPush, Pump).
  BlockingConnection& connection() { return *conn_; }
  // Writes what waits, stops the thread and closes the connection; later
  // sends and calls fail with Unavailable. Idempotent.
  void Stop();

 private:
  Status AppendLocked(uint16_t type, uint64_t request_id, const google::protobuf::MessageLite& m);
  Status WriteOutLocked();
  void Loop();

  std::unique_ptr<BlockingConnection> conn_;
  PendingChanges* pending_;
  int64_t grace_ms_;
  InterruptCheck interrupt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string out_buf_;   // encoded frames to write; guarded by mu_
  bool nudged_ = false;   // guarded by mu_
  bool urgent_ = false;   // out_buf_ holds a message sent with Send; guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread writer_;
};

}  // namespace phalanx
