// Transport: how an ObjectTransfer reaches the copies on other nodes. A pull
// is a series of range requests (rpc::PullObject), each answered by the
// serving node's ObjectTransfer::Serve; a transport carries the requests
// there and the replies back. TcpTransport (objectstore/tcp_transport.h) is
// the raylets' framed TCP; tests pass one that serves from another transfer
// in memory; transports that move device memory implement the same contract.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx::objectstore {

class Transport {
 public:
  // The reply body (ObjectTransfer::ParseReply reads it), valid only during
  // the call; or a failed `st` naming why no reply came.
  using Reply = std::function<void(const Status& st, const char* body, size_t len)>;

  virtual ~Transport() = default;

  // Sends range request `m` to the node `node_id`. `reply` runs exactly once,
  // on the loop the ObjectTransfer lives on, never from inside this call
  // unless the request failed at once (a node not alive). Requests to one
  // node may be answered in any order.
  virtual void Request(const std::string& node_id, const rpc::PullObject& m, Reply reply) = 0;
};

}  // namespace phalanx::objectstore
