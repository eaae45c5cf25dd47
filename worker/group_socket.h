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
// TLS, through a FrameReader.
//
// Between two processes of one node the frames go through shared memory
// (worker/shm_pipe.h) once the socket's first frames are swapped: the end
// that accepted offers a pipe pair with its first frame (OfferPipes), the
// end that dialled takes it with the first frame it reads (AwaitPipes). The
// socket then carries only doorbells (a byte that wakes an end that said it
// sleeps) and its close (the peer is gone). Not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/blocking_connection.h"
#include "core/frame.h"
#include "core/frame_reader.h"
#include "core/group_links.h"
#include "core/status.h"
#include "core/tls.h"
#include "worker/direct_io.h"
#include "worker/shm_pipe.h"
#include "worker/spare_bodies.h"

namespace phalanx {

class GroupSocket {
 public:
  explicit GroupSocket(DirectIo::Socket socket);
  ~GroupSocket();
  GroupSocket(const GroupSocket&) = delete;
  GroupSocket& operator=(const GroupSocket&) = delete;

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }
  bool tcp() const { return tcp_; }
  // One frame: `h` (its length is set here), then `head`, then `parts`, one
  // after the other. Unavailable when the socket failed.
  using Part = GroupLinks::Part;
  Status Write(FrameHeader h, const std::string& head, const std::vector<Part>& parts);
  Status Write(FrameHeader h, const std::string& head, const void* data, size_t n) {
    return Write(h, head, {Part{data, n}});
  }
  // Unix socket, accepting end, first frame: sends frame `h` + `head` with a
  // new pipe pair (`capacity` bytes each way); the frames after it go
  // through the pair. Without shared
  // memory (memfd failed) the frame goes alone and the socket carries on.
  Status OfferPipes(FrameHeader h, const std::string& head, size_t capacity);
  // Unix socket, dialling end, before its first read: the first frame that
  // comes may bring a pipe pair; if it does, the frames after it come (and
  // go) through the pair.
  void AwaitPipes() { awaiting_pipes_ = true; }
  bool shared_memory() const { return in_pipe_ != nullptr; }
  // Sends more of what is queued (without waiting).
  Status Flush();
  bool pending() const { return written_ < out_.size(); }
  // Through pipes: queued bytes the out pipe has room for now.
  bool can_flush() const { return out_pipe_ && pending() && out_pipe_->writable(); }
  // Poll watches the socket for POLLOUT (not for pipes: their room comes
  // with a doorbell).
  bool wants_pollout() const { return pending() && !out_pipe_; }
  // Before the calling thread sleeps in poll: through pipes, says so to the
  // peer (which rings the doorbell when it moves bytes); false if there is
  // something to do already (then it must not sleep). Woke: after the poll.
  bool PrepareToSleep();
  void Woke();
  // What has arrived, as whole frames appended to *out (without waiting).
  // Large plain bodies are read into strings taken from `spares` when it
  // has some (their memory is not cleared first). Unavailable when the peer
  // closed or sent a malformed frame.
  Status Read(std::vector<Frame>* out, SpareBodies* spares = nullptr);
  // Bytes already here and not yet read (TLS: read from the socket and not
  // yet decrypted; pipes: in the in pipe): read again without waiting for
  // poll.
  bool has_input() const;

 private:
  Status SendQueued();
  // Bytes of the stream, up to `want` (0: none now): from the in pipe once
  // there is one, else the socket. Unavailable when the peer closed.
  Result<size_t> Take(char* into, size_t want);
  Result<size_t> TakeFromSocket(char* into, size_t want);
  // The frame just read brought a pipe pair (fd `passed_fd_`): use it.
  Status UsePassedPipes();
  void Ring();  // a doorbell byte to the peer (never waits)
  Status ReadPlain(std::vector<Frame>* out, SpareBodies* spares);
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
  bool tcp_;
  bool awaiting_pipes_ = false;       // reads take a passed fd (until the first frame is whole)
  int passed_fd_ = -1;                // the pipe pair's memfd that came with the first frame
  std::unique_ptr<ShmPipe> out_pipe_;  // through shared memory: this end writes
  std::unique_ptr<ShmPipe> in_pipe_;   // ... and reads
};

}  // namespace phalanx
