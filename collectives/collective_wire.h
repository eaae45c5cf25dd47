// CollectiveWire: the collectives' messages between raylets. It is the
// ReduceChain through which this node's reduces and allreduces run steps,
// drop partial results, assemble results and fail objects on other nodes
// (REDUCE_STEP, DROP_PARTIALS, ASSEMBLE_SLICES, LOSE_OBJECTS), and it
// handles those messages when they arrive, checking each before it acts.
// The raylet's peer layer only moves the bytes (CollectivePeers).
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/reduce_manager.h"
#include "collectives/reduce_step.h"
#include "core/peer_channel.h"
#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "objectstore/object_table.h"

namespace phalanx::collectives {

// What the collectives need from the connections to other raylets.
class CollectivePeers : public PeerChannel {
 public:
  // Lets go of holds `node` has for this node, one of each of `ids`.
  virtual void Release(const std::string& node, const std::vector<std::string>& ids) = 0;
  // Holds `id` here for `node` until it releases it (or dies).
  virtual void HoldFor(const std::string& node, const std::string& id) = 0;
  // Measured bandwidth (bytes/s) and one-hop delay (s) of the link to `node`.
  virtual std::pair<double, double> Link(const std::string& node) = 0;
};

class CollectiveWire final : public ReduceChain {
 public:
  // How long a step on another node may take to start, an assembly to
  // finish (as long as a transfer may take), and a probe or drop to answer.
  static constexpr int64_t kStepTimeoutMs = 30000;
  static constexpr int64_t kAssembleTimeoutMs = 600000;
  static constexpr int64_t kProbeTimeoutMs = 3000;
  static constexpr int64_t kDropTimeoutMs = 5000;

  // All are the raylet's, owned by the caller and outliving this.
  CollectiveWire(std::string self, ReduceSteps* steps, objectstore::ObjectTable* objects, CollectivePeers* peers,
                 uint64_t chunk_bytes);

  // ReduceChain (what ReduceManager and Allreduces are made with): on this
  // node, straight to its steps; on another, as a message.
  ReduceSteps* steps() override { return steps_; }
  const std::string& self() const override { return self_; }
  uint64_t chunk_bytes() const override { return chunk_bytes_; }
  void SendStep(const std::string& node, const rpc::ReduceStep& m, std::function<void(const Status&)> started) override;
  void Drop(const std::string& node, const std::vector<std::string>& ids) override;
  std::pair<double, double> Link(const std::string& node) override { return peers_->Link(node); }
  void Probe(const std::string& node, std::function<void(bool alive)> done) override;
  void Assemble(const std::string& node, const rpc::AssembleSlices& m, std::function<void(const Status&)> done) override;
  void Release(const std::string& node, const std::vector<std::string>& ids) override { peers_->Release(node, ids); }
  void Lose(const std::string& node, const std::vector<std::string>& ids, StatusCode code,
            const std::string& why) override;
  // One of the four messages from another node; `reply` gets the Status to
  // answer with (InvalidArgument for a malformed one, which does nothing).
  void Handle(rpc::MessageType type, const std::string& body, std::function<void(const Status&)> reply);

 private:
  // Sends a request whose reply is an rpc::Status; `done` gets it.
  void CallForStatus(const std::string& node, rpc::MessageType type, const google::protobuf::Message& m,
                     int64_t timeout_ms, std::function<void(const Status&)> done);

  std::string self_;
  ReduceSteps* steps_;
  objectstore::ObjectTable* objects_;
  CollectivePeers* peers_;
  uint64_t chunk_bytes_;
};

}  // namespace phalanx::collectives
