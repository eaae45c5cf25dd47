// CollectiveWire: the collectives' messages between raylets. It is the
// ReduceChain through which this node's reduces and allreduces run steps,
// drop partial results, assemble results and fail objects on other nodes
// (REDUCE_STEP, DROP_PARTIALS, ASSEMBLE_SLICES, LOSE_OBJECTS), and it
// handles those messages when they arrive, checking each before it acts.
// The raylet's peer layer only moves the bytes (a PeerChannel); the object
// layer holds results for the nodes that will read them (a RefLender) and
// knows each link's figures (ObjectTransfer::LinkTo).
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
#include "objectstore/object_transfer.h"

namespace phalanx::collectives {

class CollectiveWire final : public ReduceChain {
 public:
  // How long a step on another node may take to start, an assembly to
  // finish (as long as a transfer may take), and a probe or drop to answer.
  static constexpr int64_t kStepTimeoutMs = 30000;
  static constexpr int64_t kAssembleTimeoutMs = 600000;
  static constexpr int64_t kProbeTimeoutMs = 3000;
  static constexpr int64_t kDropTimeoutMs = 5000;

  // All are the raylet's, owned by the caller and outliving this.
  // `holds`: holds for other nodes (Lend: an assembled result held for its
  // reader; Release: what another node held for this one); `links`: the
  // measured links (the node's transfers).
  CollectiveWire(std::string self, ReduceSteps* steps, objectstore::ObjectTable* objects, PeerChannel* peers,
                 objectstore::RefLender* holds, const objectstore::ObjectTransfer* links, uint64_t chunk_bytes);

  // ReduceChain (what ReduceManager and Allreduces are made with): on this
  // node, straight to its steps; on another, as a message.
  ReduceSteps* steps() override { return steps_; }
  const std::string& self() const override { return self_; }
  uint64_t chunk_bytes() const override { return chunk_bytes_; }
  void SendStep(const std::string& node, const rpc::ReduceStep& m, std::function<void(const Status&)> started) override;
  void Drop(const std::string& node, const std::vector<std::string>& ids) override;
  std::pair<double, double> Link(const std::string& node) override {
    auto l = links_->LinkTo(node);
    return {l.bytes_per_s, l.rtt_s};
  }
  void Probe(const std::string& node, std::function<void(bool alive)> done) override;
  void Assemble(const std::string& node, const rpc::AssembleSlices& m, std::function<void(const Status&)> done) override;
  void Release(const std::string& node, const std::vector<std::string>& ids) override { holds_->Release(node, ids); }
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
  PeerChannel* peers_;
  objectstore::RefLender* holds_;
  const objectstore::ObjectTransfer* links_;
  uint64_t chunk_bytes_;
};

}  // namespace phalanx::collectives
