#include "objectstore/tcp_transport.h"

namespace phalanx::objectstore {

void TcpTransport::Request(const std::string& node_id, const rpc::PullObject& m, Reply reply) {
  connect_(node_id, [m, reply = std::move(reply)](Result<std::shared_ptr<RpcClient>> c) mutable {
    if (!c.ok()) return reply(c.status(), nullptr, 0);
    c.value()->CallView(rpc::PULL_OBJECT, m, -1, std::move(reply));
  });
}

}  // namespace phalanx::objectstore
