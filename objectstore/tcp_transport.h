// TcpTransport: the ObjectTransfer's range requests as PULL_OBJECT frames on
// the raylets' authenticated TCP connections (one per peer node, shared with
// the rest of the peer protocol). Not thread-safe; lives on the loop of the
// connections it is given.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/rpc_client.h"
#include "objectstore/transport.h"

namespace phalanx::objectstore {

class TcpTransport : public Transport {
 public:
  // Gives a started connection to the raylet of `node_id` (at once when one
  // is open), or the error why there is none.
  using Connect =
      std::function<void(const std::string& node_id, std::function<void(Result<std::shared_ptr<RpcClient>>)>)>;

  explicit TcpTransport(Connect connect) : connect_(std::move(connect)) {}

  void Request(const std::string& node_id, const rpc::PullObject& m, Reply reply) override;

 private:
  Connect connect_;
};

}  // namespace phalanx::objectstore
