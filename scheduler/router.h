// Router: the raylet's one table from message type to the part that owns it,
// for both front doors: messages from this node's clients (drivers and
// workers, on the node's Unix socket) and from other raylets (over TCP,
// authenticated by the PeerManager before any frame is read). Each part lists
// its own routes when the raylet is built (AddRoutes(Router&)); a handler
// parses and checks its message (ids of the right size, counts within
// limits) before anything acts on it and returns false when it is malformed:
// the router names it in a warning and closes the connection. Nothing is
// read from a client before it registers; a type nobody routes is malformed.
// Not thread-safe: the raylet's io_context thread.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "core/framed_connection.h"
#include "core/proto/phalanx.pb.h"
#include "scheduler/clients.h"

namespace phalanx::scheduler {

// How a peer's request is answered: on its connection, if it is still open.
class PeerReply {
 public:
  PeerReply(std::weak_ptr<FramedConnection> conn, uint16_t type, uint64_t request_id)
      : conn_(std::move(conn)), type_(type), request_id_(request_id) {}
  // The reply.
  void operator()(const google::protobuf::MessageLite& m) const;
  // A frame of its own (a pull's ranges, which carry their own headers).
  void Send(OutFrame frame) const;
  uint64_t request_id() const { return request_id_; }
  // Whether the peer can still read a reply.
  bool open() const;

 private:
  std::weak_ptr<FramedConnection> conn_;
  uint16_t type_;
  uint64_t request_id_;
};

class Router {
 public:
  // Parses, checks and acts; false when the message is malformed.
  using ClientHandler =
      std::function<bool(const std::shared_ptr<Client>& c, uint64_t request_id, const char* body, size_t len)>;
  using PeerHandler = std::function<bool(const char* body, size_t len, const PeerReply& reply)>;

  // `what` names the message in the warning when one is malformed. A type
  // has one route per door (a second is a bug: it aborts).
  void OnClient(rpc::MessageType type, const char* what, ClientHandler handle);
  void OnPeer(rpc::MessageType type, const char* what, PeerHandler handle);

  void ClientFrame(const std::shared_ptr<Client>& c, const FrameHeader& h, const char* body, size_t len) const;
  void PeerFrame(const std::shared_ptr<FramedConnection>& conn, const FrameHeader& h, const char* body,
                 size_t len) const;

 private:
  template <typename Handler>
  struct Route {
    const char* what = nullptr;
    Handler handle;
  };
  std::array<Route<ClientHandler>, rpc::MessageType_ARRAYSIZE> client_{};
  std::array<Route<PeerHandler>, rpc::MessageType_ARRAYSIZE> peer_{};
};

// Parses a message's body; false if it is not one.
template <typename M>
bool ParseBody(M* m, const char* body, size_t len) {
  return m->ParseFromArray(body, static_cast<int>(len));
}

}  // namespace phalanx::scheduler
