// FramedConnection: one stream socket (Unix or TCP) carrying frames (see
// core/frame.h), on an Asio io_context. Reads take whatever has arrived and
// hand each whole frame to the handler; writes are queued and go out in one
// gathered write per turn of the loop, so a burst of replies and pushes
// costs one system call. Not thread-safe: every method must run on the connection's
// io_context thread. Lives on: the io_context of whoever accepted it (the
// raylet's main loop).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/generic/stream_protocol.hpp>

#include "core/frame.h"

namespace phalanx {

// A frame to write: `bytes` (header and start of the body), then `tail_len`
// bytes at `tail` that belong to someone else (a range of the object store),
// kept valid by `keep` until the write is done. Large ranges go out this way
// without being copied into a string first.
struct OutFrame {
  OutFrame() = default;
  explicit OutFrame(std::string b) : bytes(std::move(b)) {}
  std::string bytes;
  const char* tail = nullptr;
  size_t tail_len = 0;
  std::shared_ptr<const void> keep;
  size_t size() const { return bytes.size() + tail_len; }
};

class FramedConnection : public std::enable_shared_from_this<FramedConnection> {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;
  // Called with each frame; `body` is valid only during the call.
  using FrameHandler = std::function<void(const FrameHeader&, const char* body, size_t len)>;
  // Called once when the connection ends; `why` is OK for an orderly EOF.
  using CloseHandler = std::function<void(const Status& why)>;

  FramedConnection(Socket socket, std::string peer_name);
  ~FramedConnection();

  // Starts reading. REQUIRES: called once.
  void Start(FrameHandler on_frame, CloseHandler on_close);
  // Queues one encoded frame (header included).
  void Send(std::string frame) { Send(OutFrame{std::move(frame)}); }
  void Send(OutFrame frame);
  void Send(uint16_t type, uint16_t flags, uint64_t request_id, const google::protobuf::MessageLite& m) {
    Send(EncodeFrame(type, flags, request_id, m));
  }
  // Sends a frame together with a file descriptor (SCM_RIGHTS), synchronously.
  // REQUIRES: Unix socket; no write in flight (only used right after accept).
  Status SendWithFd(const std::string& frame, int fd);
  void Close();

  bool closed() const { return closed_; }
  const std::string& peer_name() const { return peer_name_; }
  size_t queued_bytes() const { return queued_bytes_; }

 private:
  void ReadMore();
  // Hands every whole frame in rbuf_ to the handler; false if the connection closed.
  bool DispatchFrames();
  // Bytes the next read may take: the rest of a large frame only, so that
  // its end lands at the end of the buffer and nothing is moved after it.
  size_t ReadSpace() const;
  void WriteMore();
  void Fail(const Status& why);

  Socket socket_;
  std::string peer_name_;
  FrameHandler on_frame_;
  CloseHandler on_close_;
  std::vector<char> rbuf_;
  size_t rbuf_filled_ = 0;
  bool write_scheduled_ = false;
  std::deque<OutFrame> queue_;     // frames waiting to be written
  std::vector<OutFrame> writing_;  // frames in the current gathered write
  size_t queued_bytes_ = 0;
  bool closed_ = false;
};

}  // namespace phalanx
