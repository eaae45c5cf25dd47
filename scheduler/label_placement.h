// Where a task or an actor creation with a label selector goes (label_match.h,
// RemoteNodes::PlaceByLabels), and what happens while no live node has the
// labels it asks for: it waits (the caller looks again every kRetryMs, as a
// node with them may join), and fails once `timeout_ms` (the raylet's
// --infeasible-timeout-ms) has passed since the first miss. The task and actor
// managers both place this way. Not thread-safe; the raylet's loop.
#pragma once

#include <cstdint>
#include <string>

#include "core/proto/phalanx.pb.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/resources.h"

namespace phalanx::scheduler {

struct LabelPlacement {
  static constexpr int64_t kRetryMs = 250;
  enum Kind { kNode, kWait, kFail } kind = kNode;
  std::string node;         // kNode: "" (this node) or the node's id
  std::string why;          // kWait, kFail: the selectors and every node's labels
  bool first_miss = false;  // kWait: the first (the caller warns once)
};

// Whether `spec` is placed by its labels (it has a selector, and the default or SPREAD strategy).
bool PlacedByLabels(const rpc::TaskSpec& spec);

// Whether a placement that missed (its labels, or its hard affinity's node,
// not in this node's view) is still within `window_ms` of its first miss:
// `since` is the caller's record of it (steady ms; 0: none yet), set here.
bool StillLooking(int64_t* since, int64_t window_ms);

// `unmet_since`: the caller's record of the first miss (steady ms; 0: none yet), updated here.
LabelPlacement PlaceByLabels(RemoteNodes& remote, const rpc::TaskSpec& spec, const ResourceSet& need,
                             int64_t timeout_ms, int64_t* unmet_since);

}  // namespace phalanx::scheduler
