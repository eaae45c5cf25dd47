// GroupSocket: one connection between two ranks of a static group, read and
// written by the thread making the group's call itself (worker/
// group_channel.h), not by a poll thread: a message costs its receiver one
// wake-up, as in MPI libraries. Authenticated before it gets here (DirectIo
// dialled or accepted it); plain, or TLS through its channel.
//
// Writes never wait: Write sends what the socket takes at once (header, head
// and data gathered in one sendmsg, no copy) and queues the rest; Flush
// sends more of it when poll says there is room. Read takes what has
// arrived and hands out whole frames: plain, each frame's body is read
// straight into its own string (grown as the bytes come, 1 MiB at a time);
// TLS, through a FrameReader. Not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/blocking_connection.h"
#include "core/frame.h"
#include "core/frame_reader.h"
#include "core/status.h"
#include "core/tls.h"
#include "worker/direct_io.h"

namespace phalanx {

class GroupSocket {
 public:
  explicit GroupSocket(DirectIo::Socket socket);
  ~GroupSocket();
  GroupSocket(const GroupSocket&) = delete;
  GroupSocket& operator=(const GroupSocket&) = delete;

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  // One frame: `h` (its length is set here), then `head`, then `n` bytes at
  // `data`. Unavailable when the socket failed.
  Status Write(FrameHeader h, const std::string& head, const void* data, size_t n);
  // Sends more of what is queued (without waiting).
  Status Flush();
  bool pending() const { return written_ < out_.size(); }
  // What has arrived, as whole frames appended to *out (without waiting).
  // Plain bodies are read into strings taken from *spares when it has some
  // (their memory is not cleared first). Unavailable when the peer closed or
  // sent a malformed frame.
  Status Read(std::vector<Frame>* out, std::vector<std::string>* spares = nullptr);
  // TLS: bytes already read from the socket and not yet decrypted (read
  // again without waiting for poll).
  bool has_input() const;

 private:
  Status SendQueued();
  Status ReadPlain(std::vector<Frame>* out, std::vector<std::string>* spares);
  Status ReadTls(std::vector<Frame>* out);
  Status TakeFrames(std::vector<Frame>* out);  // TLS: the whole frames reader_ holds

  int fd_;
  std::string peer_;
  std::unique_ptr<TlsSession> tls_;
  FrameReader reader_{64 << 10};  // TLS: the decrypted bytes
  // Plain: the frame being read, straight from the socket into its own
  // body (no copy out of a shared buffer).
  char header_[kFrameHeaderSize];
  size_t header_got_ = 0;
  Frame frame_;
  size_t body_got_ = 0;
  std::string out_;  // bytes not yet written (TLS: records), from written_ on
  size_t written_ = 0;
  std::string raw_;  // TLS: what one read brought
};

}  // namespace phalanx
