// FramedConnection: one stream socket (Unix or TCP) carrying frames (see
// core/frame.h), on an Asio io_context. Reads take whatever has arrived and
// hand each whole frame to the handler; writes are queued and go out in one
// gathered write per turn of the loop, so a burst of replies and pushes
// costs one system call. Memory follows the bytes that arrived (FrameReader),
// never a declared length. With RequireAuth, the connection first runs the
// cluster-token handshake (core/auth.h) within a deadline: no frame reaches
// the handler, and none of Send's frames leave, before it succeeds; a
// failed or slow one closes the connection and logs the peer. With
// UseTls, every byte after the TCP connect is TLS (core/tls.h): the TLS
// handshake, then the cluster-token handshake bound to that channel, then
// the frames, within the same deadline.
// Not thread-safe: every method must run on the connection's
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

#include "core/auth.h"
#include "core/frame.h"
#include "core/frame_reader.h"
#include "core/tls.h"

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

  // Authenticate the peer first (before Start): as `role` of the handshake,
  // within `timeout_ms`. `address` names the peer in the refusal log.
  void RequireAuth(Handshake::Role role, const std::string& token, std::string address,
                   int64_t timeout_ms = kAuthTimeoutMs);
  // Speak TLS (as the server or the client of it) under the handshake.
  // REQUIRES: RequireAuth called first, before Start.
  void UseTls(std::shared_ptr<const TlsContext> ctx);
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
  bool authenticated() const { return !handshake_; }
  const std::string& peer_name() const { return peer_name_; }
  size_t queued_bytes() const { return queued_bytes_; }

 private:
  void ReadMore();
  // Handles `n` bytes that arrived at `data`; false if the connection closed.
  bool OnBytes(const char* data, size_t n);
  // TLS: decrypts what arrived into the frame reader; false if the connection closed.
  bool DrainTls();
  // Starts the handshake once the channel is up (at Start, or once TLS is): a client sends its hello.
  void OnChannelReady();
  // Where the next read may put bytes; closes the connection (false) if the reader cannot grow.
  bool ReaderSpace(std::pair<char*, size_t>* out);
  // Hands every whole frame read to the handshake or the handler; false if the connection closed.
  bool DispatchFrames();
  // A handshake frame: answers it; false if the peer failed (the connection is closed).
  bool OnHandshakeFrame(const FrameHeader& h, const char* body);
  void WriteMore();
  void Fail(const Status& why);

  Socket socket_;
  std::string peer_name_;
  FrameHandler on_frame_;
  CloseHandler on_close_;
  FrameReader reader_;
  std::unique_ptr<Handshake> handshake_;          // set until the peer authenticated
  Handshake::Role role_ = Handshake::Role::kServer;
  std::unique_ptr<TlsSession> tls_;               // with UseTls
  std::vector<char> tls_in_;                      // TLS: bytes read from the socket
  std::string tls_out_;                           // TLS: the records being written
  bool channel_ready_ = false;                    // the handshake may start (TLS: once TLS is up)
  bool first_bytes_ = true;                       // nothing read yet
  std::unique_ptr<boost::asio::steady_timer> auth_timer_;
  std::string auth_address_;
  int64_t auth_timeout_ms_ = 0;
  bool write_scheduled_ = false;
  bool write_in_flight_ = false;
  std::deque<OutFrame> handshake_out_;  // handshake frames: written first, before authentication
  std::deque<OutFrame> queue_;     // frames waiting to be written (after authentication)
  std::vector<OutFrame> writing_;  // frames in the current gathered write
  size_t queued_bytes_ = 0;
  bool closed_ = false;
};

}  // namespace phalanx
