// ClusterView: what this raylet knows of the other nodes, from the GCS node
// table (read at every heartbeat) and corrected locally between reads for
// the work it sent them. Used to spill tasks that do not fit here to a node
// where they fit, and to tell "fits nowhere" from "busy now".
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "scheduler/resources.h"

namespace phalanx::scheduler {

class ClusterView {
 public:
  explicit ClusterView(std::string self_id, int64_t dead_after_ms)
      : self_(std::move(self_id)), dead_after_ms_(dead_after_ms) {}

  // Replaces the view with the node table as read now (`now_ms`: wall clock).
  void Update(const std::vector<rpc::NodeInfo>& nodes, int64_t now_ms);
  // Another live node whose free resources hold `need` now (the one with the most free CPU), or nullptr.
  const rpc::NodeInfo* PickNode(const ResourceSet& need) const;
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
  // until a heartbeat newer than now shows it is back.
  void Suspect(const std::string& node_id, int64_t now_ms);
  // Nodes whose heartbeat was already too old at the last Update.
  const std::vector<rpc::NodeInfo>& Silent() const { return silent_; }
  size_t size() const { return nodes_.size(); }

 private:
  static ResourceSet Total(const rpc::NodeInfo& n);
  static ResourceSet Available(const rpc::NodeInfo& n);

  std::string self_;
  int64_t dead_after_ms_;
  std::unordered_map<std::string, rpc::NodeInfo> nodes_;  // live others, by node id
  std::unordered_map<std::string, ResourceSet> reserved_;
  std::vector<rpc::NodeInfo> silent_;
  std::unordered_map<std::string, int64_t> suspects_;  // node id -> when it failed us (wall clock ms)
};

}  // namespace phalanx::scheduler
