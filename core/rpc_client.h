// RpcClient: request/reply over a FramedConnection on an Asio io_context,
// for raylet-to-raylet traffic (TCP) and anything else that must not block
// its loop. Each call takes a timeout; a reply, the timeout or the loss of
// the connection ends it, exactly once, with a Status that names the peer.
// Frames that are not replies go to the push handler.
// Not thread-safe; lives on the io_context of its connection.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio.hpp>

#include "core/framed_connection.h"

namespace phalanx {

class RpcClient : public std::enable_shared_from_this<RpcClient> {
 public:
  // Called with the reply body, or with the error that ended the call.
  using ReplyCallback = std::function<void(Result<std::string> body)>;
  // Called with the reply body in the connection's read buffer (valid only
  // during the call: no copy), or with the error and no body.
  using ViewCallback = std::function<void(const Status& st, const char* body, size_t len)>;
  using PushHandler = std::function<void(const FrameHeader&, const char* body, size_t len)>;

  // Connects over TCP to host:port within `timeout_ms`; `done` runs on `io`.
  // The connection authenticates with `token` (core/auth.h) before any call
  // goes out; a peer without the token fails every call naming it. With
  // `tls` (non-null) the whole connection is TLS (core/tls.h).
  static void ConnectTcp(boost::asio::io_context& io, const std::string& host, int port, int64_t timeout_ms,
                         const std::string& token, std::shared_ptr<const TlsContext> tls,
                         std::function<void(Result<std::shared_ptr<RpcClient>>)> done);
  // Wraps an established connection. Call Start before any Call.
  RpcClient(boost::asio::io_context& io, std::shared_ptr<FramedConnection> conn);

  void Start(PushHandler on_push = nullptr);
  void Call(uint16_t type, const google::protobuf::MessageLite& request, int64_t timeout_ms, ReplyCallback cb);
  // As Call, for large replies read in place (object ranges).
  void CallView(uint16_t type, const google::protobuf::MessageLite& request, int64_t timeout_ms, ViewCallback cb);
  // Fails every pending call with `why` and closes the connection.
  void Close(const Status& why);
  size_t pending() const { return pending_.size(); }
  bool closed() const { return conn_->closed(); }
  const std::string& peer_name() const { return conn_->peer_name(); }

 private:
  struct Pending {
    ViewCallback cb;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  void Finish(uint64_t id, const Status& st, const char* body, size_t len);
  void FailAll(const Status& why);

  boost::asio::io_context& io_;
  std::shared_ptr<FramedConnection> conn_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t next_id_ = 1;
  PushHandler on_push_;
};

}  // namespace phalanx
