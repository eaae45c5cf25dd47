// What the node's task and actor managers ask of the rest of the cluster, as
// interfaces given at construction: RemoteNodes (the other raylets: spilling,
// feasibility, SPREAD, remote cancel and kill; the PeerManager implements
// it) and GroupPlacement (where a placement group's bundle is; the
// PlacementGroups implement it). Each manager is unit-tested with fakes of
// these (tests/cpp/task_manager_test.cc, actor_manager_test.cc). Not
// thread-safe; the raylet's loop.
#pragma once

#include <functional>
#include <string>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "scheduler/resources.h"

namespace phalanx::scheduler {

class RemoteNodes {
 public:
  virtual ~RemoteNodes() = default;
  // Sends a ready task or actor creation (`forward`: ref arguments resolved)
  // to a node where `need` fits now; that node's id, or "" if none.
  virtual std::string Spill(const rpc::TaskSpec& forward, const ResourceSet& need) = 0;
  // Sends it to `node_id`; false if that node is not alive.
  virtual bool SpillTo(const std::string& node_id, const rpc::TaskSpec& forward) = 0;
  // Whether some node of the cluster (this one included) could ever hold `need`.
  virtual bool FitsSomewhere(const ResourceSet& need) const = 0;
  // SPREAD: the next node in round robin over this one and the others; "" means this one.
  virtual std::string NextSpreadNode() = 0;
  // Cancels a task that was sent to `node_id` (fire and forget).
  virtual void CancelTask(const std::string& node_id, const rpc::CancelTask& m) = 0;
  // Asks the node hosting an actor to kill it; `done` gets that node's answer
  // (OK when the node is gone: so is the actor).
  virtual void KillActor(const std::string& node_id, const std::string& actor_id, bool no_restart,
                         std::function<void(const Status&)> done) = 0;
};

// Where a task or actor in a bundle of a placement group must go.
struct BundleWhere {
  enum Kind { kWait, kNode, kGone } kind = kWait;
  std::string node;  // kNode: the node ("" or self: here)
  std::string why;   // kGone: why it can never be placed
};

// Whether another node is alive, as last heard (the PeerManager's view).
class NodeLiveness {
 public:
  virtual ~NodeLiveness() = default;
  virtual bool IsAlive(const std::string& node_id) const = 0;
};

class GroupPlacement {
 public:
  virtual ~GroupPlacement() = default;
  // Bundle `index` (-1: any) of `pg_id`, for something needing `need` (plain
  // resource names). kWait: not placed yet (work waiting on it is looked at
  // again when it is); kGone: removed, or `need` is more than the bundle holds.
  virtual BundleWhere Locate(const std::string& pg_id, int index, const ResourceSet& need) = 0;
};

// What a task or actor creation asks for, by plain resource names (a
// placement group's bundle is sized in these).
inline ResourceSet PlainNeed(const rpc::TaskSpec& spec) {
  ResourceSet need;
  if (spec.num_cpus() > 0) need.Set("CPU", spec.num_cpus());
  for (const auto& [k, v] : spec.resources()) need.Set(k, v);
  return need;
}

}  // namespace phalanx::scheduler
