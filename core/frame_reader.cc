#include "core/frame_reader.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace phalanx {

namespace {
// Each reader's first 64 KiB are its own; beyond that, buffers come from the
// process's budget. Frames this large are read up to their end only.
constexpr size_t kUncharged = 64u << 10;
// A buffer above this, holding less than kUncharged, shrinks back.
constexpr size_t kShrinkAbove = 4u << 20;

size_t DefaultProcessLimit() {
  if (const char* v = std::getenv("PHALANX_MAX_UNREAD_BYTES")) {
    char* end = nullptr;
    unsigned long long n = std::strtoull(v, &end, 10);
    if (end != v && n > 0) return static_cast<size_t>(n);
  }
  return size_t{2} << 30;
}

std::atomic<size_t> g_charged{0};
std::atomic<size_t> g_limit{DefaultProcessLimit()};
}  // namespace

void FrameReader::SetProcessLimit(size_t bytes) { g_limit = bytes; }
size_t FrameReader::ProcessCharged() { return g_charged.load(); }

FrameReader::FrameReader(size_t initial_bytes) : initial_(std::max(initial_bytes, kFrameHeaderSize * 4)) {}

FrameReader::~FrameReader() { g_charged -= charged_; }

Status FrameReader::Resize(size_t bytes) {
  size_t charge = bytes > kUncharged ? bytes - kUncharged : 0;
  if (charge > charged_) {
    size_t more = charge - charged_;
    size_t before = g_charged.fetch_add(more);
    if (before + more > g_limit.load()) {
      g_charged -= more;
      return Status::OutOfMemory("the unread bytes of this process's connections would pass its limit of " +
                                       std::to_string(g_limit.load() >> 20) +
                                       " MiB (PHALANX_MAX_UNREAD_BYTES)");
    }
  } else {
    g_charged -= charged_ - charge;
  }
  charged_ = charge;
  // Uninitialized on purpose: only the received bytes are copied over.
  std::unique_ptr<char[]> next(new char[bytes]);
  if (filled_ > 0) std::memcpy(next.get(), buf_.get(), filled_);
  buf_ = std::move(next);
  cap_ = bytes;
  return Status::OK();
}

Status FrameReader::Check(const FrameHeader& h) const {
  if (IsHandshake(h.type) != handshake_only_) {
    return Status::InvalidArgument(handshake_only_
                                       ? "expected the authentication handshake, got a message of type " +
                                             std::to_string(h.type)
                                       : "an authentication message (type " + std::to_string(h.type) +
                                             ") outside the handshake");
  }
  return ValidateHeader(h);
}

Result<std::pair<char*, size_t>> FrameReader::Space() {
  if (start_ > 0) {  // drop what was handed out; a partial frame moves to the front
    if (start_ < filled_) std::memmove(buf_.get(), buf_.get() + start_, filled_ - start_);
    filled_ -= start_;
    start_ = 0;
  }
  // (Before authentication a reader holds no more than a handshake frame.)
  size_t first = handshake_only_ ? kFrameHeaderSize + kHandshakeBody : initial_;
  size_t want = std::max(cap_, first);
  size_t read_end = std::numeric_limits<size_t>::max();
  if (filled_ >= kFrameHeaderSize) {
    FrameHeader h = DecodeHeader(buf_.get());
    PHALANX_RETURN_IF_ERROR(Check(h));
    size_t total = kFrameHeaderSize + h.length;  // > filled_: Next took the whole ones
    if (total <= kUncharged) {
      want = std::max(want, total);  // a small frame: room for all of it
      if (last_full_ && cap_ < kUncharged) want = std::max(want, std::min(cap_ * 2, kUncharged));
    } else {
      // A large one grows with what arrived (at most double it), never to
      // the declared size at once, and is read up to its end only.
      if (cap_ - filled_ < cap_ / 4) want = std::min(total, std::max(filled_ * 2, cap_));
      read_end = total;
    }
  } else if (cap_ > kShrinkAbove) {
    want = kUncharged;  // a large frame went by: let its buffer go
  } else if (last_full_ && cap_ < kUncharged && !handshake_only_) {
    want = cap_ * 2;  // reads fill the buffer: take more per read (up to 64 KiB)
  }
  if (want != cap_) PHALANX_RETURN_IF_ERROR(Resize(want));
  size_t end = std::min(cap_, read_end);
  offered_ = end - filled_;
  return std::make_pair(buf_.get() + filled_, offered_);
}

Result<bool> FrameReader::Next(FrameHeader* h, const char** body) {
  if (filled_ - start_ < kFrameHeaderSize) return false;
  FrameHeader head = DecodeHeader(buf_.get() + start_);
  PHALANX_RETURN_IF_ERROR(Check(head));
  size_t total = kFrameHeaderSize + head.length;
  if (filled_ - start_ < total) return false;
  *h = head;
  *body = buf_.get() + start_ + kFrameHeaderSize;
  start_ += total;
  return true;
}

}  // namespace phalanx
