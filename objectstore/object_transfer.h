// ObjectTransfer: copies objects between raylets over TCP, chunk by chunk.
//
// Pull(id, node) makes `id` ready in this node's object table with the value
// the other node has (or will have: the server waits until it is ready
// there). Small values come in one reply; a store object is created here at
// its full size and filled by `chunk_bytes` requests with `window` of them in
// flight, then sealed. A pull of an id already known here, or already being
// pulled, does nothing. A failed pull (the node went away, the object is
// lost there) marks the object lost with the reason, naming the node.
//
// Serve answers another node's PULL_OBJECT from this node's table.
//
// This is the first cut of the transfer layer of issue 4: the pulling node
// reads from the one node it is told about; reading from partial copies and
// choosing sources from the object directory come next.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/proto/phalanx.pb.h"
#include "core/rpc_client.h"
#include "objectstore/object_store.h"
#include "objectstore/object_table.h"

namespace phalanx::objectstore {

struct TransferOptions {
  uint64_t chunk_bytes = 4 << 20;  // bytes per request
  int window = 4;                  // requests in flight per object
  int64_t chunk_timeout_ms = 60000;
};

class ObjectTransfer {
 public:
  // Gives a connection to the raylet of `node_id`, or the error why there is none.
  using Connect =
      std::function<void(const std::string& node_id, std::function<void(Result<std::shared_ptr<RpcClient>>)>)>;

  ObjectTransfer(ObjectTable* objects, ObjectStore* store, Connect connect, TransferOptions options = {});

  void Pull(const std::string& id, const std::string& node_id);
  // Answers `m` (maybe later, when the object becomes ready) through `reply`.
  void Serve(const rpc::PullObject& m, std::function<void(const rpc::PullObjectReply&)> reply);
  size_t num_pulling() const { return pulls_.size(); }

 private:
  struct PullState {
    std::string node_id;
    std::shared_ptr<RpcClient> client;
    uint64_t size = 0;
    uint64_t next_offset = 0;  // of the next range to ask for
    uint64_t received = 0;
    int inflight = 0;
    bool failed = false;
  };
  void Request(const std::string& id, uint64_t offset);
  void OnReply(const std::string& id, uint64_t offset, Result<std::string> body);
  void Fail(const std::string& id, const std::string& why);

  ObjectTable* objects_;
  ObjectStore* store_;
  Connect connect_;
  TransferOptions options_;
  std::unordered_map<std::string, PullState> pulls_;
};

}  // namespace phalanx::objectstore
