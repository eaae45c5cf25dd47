// ClusterView: what this raylet knows of the other nodes, from the GCS node
// table (read at every heartbeat) and corrected locally between reads for
// the work it sent them. Used to spill tasks that do not fit here to a node
// where they fit, and to tell "fits nowhere" from "busy now".
//
// Liveness: each node's heartbeat thread writes a new value to the GCS's
// "heartbeats" hash every beat ("seq:late_ms", scheduler/heartbeat.h). A
// node is silent when its value has not changed for dead_after_ms of this
// raylet's own steady clock, plus the lateness its thread reports (how late
// its own timer fired lately, capped at dead_after_ms): no clocks are
// compared across machines, a reader that was itself stalled sees a change
// rather than a death, and Forgive() restarts every count (after the GCS
// was away, when no node could write).
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "scheduler/label_match.h"
#include "scheduler/resources.h"

namespace phalanx::scheduler {

class ClusterView {
 public:
  explicit ClusterView(std::string self_id, int64_t dead_after_ms)
      : self_(std::move(self_id)), dead_after_ms_(dead_after_ms) {
    self_labels_["ray.io/node-id"] = ToHex(self_);  // (the rest from this node's record, at each Update)
  }

  // Replaces the view with the node table and heartbeats (node id hex ->
  // value) as read now (`now_ms`: this process's steady clock). A node with
  // no heartbeat entry is judged by its NodeInfo's heartbeat_ms.
  void Update(const std::vector<rpc::NodeInfo>& nodes,
              const std::unordered_map<std::string, std::string>& heartbeats, int64_t now_ms);
  // Every node's silence counts from `now_ms` again.
  void Forgive(int64_t now_ms);
  // Another live node whose free resources hold `need` now (the one with the most free CPU), or nullptr;
  // with `selector`, only one whose labels match it.
  const rpc::NodeInfo* PickNode(const ResourceSet& need, const LabelConstraints* selector = nullptr) const;
  // The label selector of `spec` that applies now (label_match.h's ApplicableSelector over the live nodes,
  // this one with `self_total`, that could hold `need`), or nullptr when no live node has the labels.
  const LabelConstraints* SelectorFor(const rpc::TaskSpec& spec, const ResourceSet& need,
                                      const ResourceSet& self_total) const;
  // RemoteNodes::PlaceByLabels, over this view: the first selector (its own, then its fallbacks) with a
  // matching node where `need` fits now (this one first: `self_free`); else the first with a matching
  // node that could ever hold it (it waits there).
  Result<std::string> PlaceByLabels(const rpc::TaskSpec& spec, const ResourceSet& need,
                                    const ResourceSet& self_total, const ResourceSet& self_free) const;
  // The live node with that id (not this one), or nullptr.
  const rpc::NodeInfo* Find(const std::string& node_id) const;
  // The live other nodes, in a stable order (for round robin).
  std::vector<const rpc::NodeInfo*> Others() const;
  // True when some live node (this one included, via `self_total`) could ever hold `need`.
  bool FitsSomewhere(const ResourceSet& need, const ResourceSet& self_total) const;
  // What a live other node has free (as last heard, less what was booked since).
  ResourceSet Free(const rpc::NodeInfo& n) const;
  // Books `need` against the node's free resources until the next Update.
  void Reserve(const std::string& node_id, const ResourceSet& need);
  // A connection to the node failed: leave it out (of picks, Find, Others)
  // until a heartbeat newer than the last one seen shows it is back.
  void Suspect(const std::string& node_id);
  // Nodes whose heartbeat was already too old at the last Update.
  const std::vector<rpc::NodeInfo>& Silent() const { return silent_; }
  size_t size() const { return nodes_.size(); }
  // Other nodes the node table holds dead, at the last Update.
  size_t dead() const { return dead_; }
  int64_t dead_after_ms() const { return dead_after_ms_; }

 private:
  static ResourceSet Total(const rpc::NodeInfo& n);
  static ResourceSet Available(const rpc::NodeInfo& n);

  std::string self_;
  int64_t dead_after_ms_;
  NodeLabels self_labels_;  // this node's, from its record
  size_t dead_ = 0;
  std::unordered_map<std::string, rpc::NodeInfo> nodes_;  // live others, by node id
  std::unordered_map<std::string, ResourceSet> reserved_;
  std::vector<rpc::NodeInfo> silent_;
  struct Beat {
    std::string value;       // the last heartbeat value seen
    int64_t changed_at = 0;  // when it last changed (steady ms)
  };
  std::unordered_map<std::string, Beat> beats_;              // node id -> its heartbeat as last seen
  std::unordered_map<std::string, std::string> suspects_;    // node id -> its heartbeat value when it failed us
};

}  // namespace phalanx::scheduler
