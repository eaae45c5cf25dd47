// FrameReader: the receive side of one framed connection (core/frame.h),
// shared by every reader in phalanx (the raylet's Asio connections, the
// direct connections' poll thread, the clients' blocking connection).
//
// Memory follows the bytes that arrived, never a declared length: a header
// that announces N bytes costs nothing until they come, and the buffer at
// most doubles what is buffered (up to the end of the frame being read). A
// frame's length is checked against its type's limit (MaxFrameBody) as soon
// as its header is whole, and while `handshake_only` is set only handshake
// frames pass. Every reader in the process draws its buffers beyond the
// first few KiB from one budget (SetProcessLimit); a reader that would go
// past it fails instead of allocating.
//
// Use: read into Space(), Commit(n), then take frames with Next() until it
// says none; the bodies stay valid until the next Space().
// Not thread-safe: one reader per connection, used by one thread at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "core/frame.h"
#include "core/status.h"

namespace phalanx {

class FrameReader {
 public:
  explicit FrameReader(size_t initial_bytes = 4096);
  ~FrameReader();
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;

  // Where the next read may put bytes, and how many (at least 1). Grows the
  // buffer as what is buffered demands (moving a partial frame to the front
  // first); a large frame's read stops at its end, so that the next frame
  // starts a fresh buffer. OutOfMemory when the process's budget for
  // unread bytes is spent.
  Result<std::pair<char*, size_t>> Space();
  // `n` bytes were written at Space().
  void Commit(size_t n) {
    filled_ += n;
    last_full_ = n == offered_;
  }
  // The next whole frame: true with *h and *body set (body valid until the
  // next Space()), false when none is whole yet. Error: malformed header
  // (the connection must close).
  Result<bool> Next(FrameHeader* h, const char** body);

  // While set, only handshake frames (AUTH_*) are accepted, into a buffer
  // of at most a handshake frame's size; after, the buffer starts at
  // `initial_bytes` (the constructor's).
  void set_handshake_only(bool on) { handshake_only_ = on; }
  // Bytes received and not yet handed out by Next.
  size_t buffered() const { return filled_ - start_; }
  // Bytes of buffer this reader holds.
  size_t capacity() const { return cap_; }

  // The process's budget for buffer bytes beyond each reader's first 64 KiB
  // (default 2 GiB, or PHALANX_MAX_UNREAD_BYTES). Bytes charged now:
  static void SetProcessLimit(size_t bytes);
  static size_t ProcessCharged();

 private:
  Status Resize(size_t bytes);
  Status Check(const FrameHeader& h) const;

  size_t initial_;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  size_t offered_ = 0;     // bytes the last Space() offered
  bool last_full_ = false; // the last read took all of them
  size_t start_ = 0;   // first byte not handed out
  size_t filled_ = 0;  // end of the bytes received
  size_t charged_ = 0; // bytes of buf_ charged to the process budget
  bool handshake_only_ = false;
};

}  // namespace phalanx
