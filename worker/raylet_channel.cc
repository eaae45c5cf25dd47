#include "worker/raylet_channel.h"

#include <algorithm>

#include "core/message_limits.h"
#include "core/process.h"

namespace phalanx {

namespace {
constexpr auto kChangesDelay = std::chrono::milliseconds(5);   // reference changes alone wait this
constexpr auto kSendDelay = std::chrono::microseconds(200);     // one-way messages wait at most this
constexpr size_t kOutBufferBytes = 64 * 1024;                   // ... or until this many bytes
constexpr auto kWaitSlice = std::chrono::milliseconds(100);     // interrupt checks this often
std::string SizeText(size_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}
}  // namespace

RayletChannel::RayletChannel(std::unique_ptr<BlockingConnection> conn, PendingChanges* pending, int64_t grace_ms)
    : conn_(std::move(conn)), pending_(pending), grace_ms_(grace_ms), writer_([this] { Loop(); }) {}

RayletChannel::~RayletChannel() { Stop(); }

void RayletChannel::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    pending_->DrainInto(&out_buf_);
    (void)WriteOutLocked();
    stopping_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  conn_->Shutdown("this process disconnected from the raylet");
}

// Appends the frame (after the pending changes), unless it is larger than a receiver takes.
Status RayletChannel::AppendLocked(uint16_t type, uint64_t request_id, const google::protobuf::MessageLite& m) {
  if (!stopping_) pending_->DrainInto(&out_buf_);
  size_t before = out_buf_.size();
  out_buf_ += EncodeFrame(type, 0, request_id, m);
  size_t body = out_buf_.size() - before - kFrameHeaderSize;
  if (body <= MaxFrameBody(type, 0)) return Status::OK();
  out_buf_.resize(before);
  return Status::InvalidArgument("a message of " + SizeText(body) + " is larger than the " +
                                 SizeText(MaxFrameBody(type, 0)) + " a raylet takes for its kind (" +
                                 std::to_string(type) + "); pass large values through the object store (put)");
}

Status RayletChannel::Send(uint16_t type, const google::protobuf::MessageLite& m) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    wake = !urgent_;
    PHALANX_RETURN_IF_ERROR(AppendLocked(type, 0, m));
    if (out_buf_.size() >= kOutBufferBytes) return WriteOutLocked();
    urgent_ = true;
  }
  if (wake) cv_.notify_one();  // the writer sends the batch shortly
  return Status::OK();
}

Status RayletChannel::SendLazy(uint16_t type, const google::protobuf::MessageLite& m) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    wake = out_buf_.empty() && !nudged_;
    PHALANX_RETURN_IF_ERROR(AppendLocked(type, 0, m));
    if (out_buf_.size() >= kOutBufferBytes) return WriteOutLocked();
  }
  if (wake) cv_.notify_one();  // the writer sends it with the changes, later
  return Status::OK();
}

Status RayletChannel::SendNow(uint16_t type, const google::protobuf::MessageLite& m) {
  std::lock_guard<std::mutex> l(mu_);
  PHALANX_RETURN_IF_ERROR(AppendLocked(type, 0, m));
  return WriteOutLocked();
}

Status RayletChannel::Flush() {
  std::lock_guard<std::mutex> l(mu_);
  if (!stopping_) pending_->DrainInto(&out_buf_);
  return WriteOutLocked();
}

void RayletChannel::Nudge() {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    wake = !nudged_ && out_buf_.empty();  // (else the writer is on its way already)
    nudged_ = true;
  }
  if (wake) cv_.notify_one();
}

Status RayletChannel::WriteOutLocked() {
  urgent_ = false;
  if (out_buf_.empty()) return Status::OK();
  std::string batch;
  batch.swap(out_buf_);
  return conn_->SendRaw(batch);  // under mu_, so batches keep their order
}

Result<Frame> RayletChannel::Call(uint16_t type, const google::protobuf::MessageLite& m, int64_t timeout_ms) {
  uint64_t id = conn_->NextRequestId();
  {
    std::lock_guard<std::mutex> l(mu_);
    PHALANX_RETURN_IF_ERROR(AppendLocked(type, id, m));
    PHALANX_RETURN_IF_ERROR(WriteOutLocked());
  }
  Deadline deadline = timeout_ms < 0 ? DeadlineAfterMs(-1) : DeadlineAfterMs(timeout_ms + grace_ms_);
  while (true) {
    Deadline slice = std::min(deadline, Clock::now() + kWaitSlice);
    auto r = conn_->WaitReply(id, slice);
    if (r.ok() || r.status().code() != StatusCode::kTimedOut) return r;
    if (Clock::now() >= deadline) {
      return Status::Unavailable(conn_->peer_name() + " did not answer within " + std::to_string(grace_ms_) +
                                 " ms past the request's timeout");
    }
    if (interrupt_) PHALANX_RETURN_IF_ERROR(interrupt_());
  }
}

void RayletChannel::Loop() {
  NameThisThread("phalanx-batcher");
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    cv_.wait(l, [&] { return stopping_ || nudged_ || !out_buf_.empty(); });
    if (stopping_) break;
    // Let a burst accumulate, then send it in one write: messages soon, reference changes and lazy
    // messages later (a message that comes while they wait cuts their wait short: it goes within kSendDelay).
    if (!urgent_) cv_.wait_for(l, kChangesDelay, [&] { return stopping_ || urgent_; });
    if (urgent_) cv_.wait_for(l, kSendDelay, [&] { return stopping_; });
    if (stopping_) break;
    nudged_ = false;  // (this drain takes every change nudged for so far, those of the delay too)
    pending_->DrainInto(&out_buf_);
    (void)WriteOutLocked();
  }
}

}  // namespace phalanx
