// PeerChannel: requests to another raylet, by node id, over the
// authenticated peer connection (scheduler/peer_manager.h implements it;
// tests fake it). The one way the object layer, the collectives and the
// scheduler reach other nodes: each used to declare its own copy of Call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <google/protobuf/message.h>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx {

class PeerChannel {
 public:
  virtual ~PeerChannel() = default;
  // Sends `m` as a `type` request to `node`; `done` (may be null: a one-way
  // message) gets the reply's body, or why none came within `timeout_ms`.
  virtual void Call(const std::string& node, rpc::MessageType type, const google::protobuf::Message& m,
                    int64_t timeout_ms, std::function<void(Result<std::string>)> done) = 0;
};

}  // namespace phalanx
