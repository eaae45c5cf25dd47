// ResourceLedger: who holds the node's resources. Tasks and actors take
// them (TryAcquire) and give them back (Release); a worker blocked in a get
// lends its CPUs back meanwhile (Lend / Reclaim). Placement-group bundles
// are set aside in two phases: Prepare takes a bundle's resources from the
// node's plain pool and holds them; Commit makes them the bundle's own,
// under names of the group (Ray's scheme): "CPU" of bundle 2 of group G
// becomes "CPU_group_2_<G>" and "CPU_group_<G>" (any bundle of G here). A
// task placed in a bundle asks for those names (InBundle), so everything
// that matches resources (dispatch, spilling, the node table) places it
// without knowing about groups. ReturnGroup gives a group's bundles back:
// what no task uses returns to the plain pool at once, what tasks use when
// they release it.
//
// GPU ids come from the GpuAllocator for a request's plain "GPU" and for the
// GPUs of a bundle it asks for. Owned by the Raylet beneath both the
// TaskManager and the ActorManager; not thread-safe (the raylet's loop).
#pragma once

#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "scheduler/gpu_allocator.h"
#include "scheduler/resources.h"

namespace phalanx::scheduler {

class ResourceLedger {
 public:
  explicit ResourceLedger(ResourceSet total);

  const ResourceSet& total() const { return total_; }
  const ResourceSet& available() const { return available_; }

  // Takes `need` (and GPU ids for its GPUs) if it is free now.
  bool TryAcquire(const ResourceSet& need, std::vector<int>* gpus);
  // Gives back what one TryAcquire took (`lent`: its holder had lent it
  // back already, so only the GPU ids return).
  void Release(const ResourceSet& need, const std::vector<int>& gpus, bool lent = false);
  // A holder blocked in a get lends `r` back until it is unblocked (GPU ids stay with it).
  void Lend(const ResourceSet& r) { Lent(ForRelease(r), +1); }
  void Reclaim(const ResourceSet& r) { Lent(ForRelease(r), -1); }

  // Phase one: sets bundle `index` of group `pg` aside from the plain pool.
  // Unavailable (saying what is short) when it does not fit now.
  Status Prepare(const std::string& pg, int index, const ResourceSet& bundle);
  // Phase two: the prepared bundle's resources become the group's.
  Status Commit(const std::string& pg, int index);
  // Gives back one bundle that was prepared but not committed.
  void Abort(const std::string& pg, int index);
  // Gives back every bundle of `pg` here (prepared or committed); the group
  // is gone for good on this node (Removed).
  void ReturnGroup(const std::string& pg);
  bool Removed(const std::string& pg) const { return removed_.count(pg) > 0; }
  // How many group names it remembers (for tests: a create+remove loop keeps none).
  size_t names_kept() const { return group_of_.size(); }
  // Bundles of `pg` committed here.
  std::vector<int> BundlesOf(const std::string& pg) const;

  // A request for `need` from bundle `index` of `pg` (-1: any bundle of it
  // on the node), in the group's names.
  static ResourceSet InBundle(const ResourceSet& need, const std::string& pg, int index);
  // "CPU_group_2_<hex>" (index >= 0) or "CPU_group_<hex>" (-1).
  static std::string GroupKey(const std::string& base, const std::string& pg, int index);

 private:
  struct Bundle {
    ResourceSet amounts;
    bool committed = false;
  };
  // Lends (+1) or reclaims (-1) `r`, noting how much of a group's is lent
  // (a group removed meanwhile is still held by that holder).
  void Lent(const ResourceSet& r, int sign);
  // The GPUs a request takes ids for: plain "GPU", and a group's "GPU_group_<G>".
  double GpuAmount(const ResourceSet& need) const;
  // `need` with the names of removed groups turned back into plain names
  // (their "any bundle" names; the per-bundle ones are dropped).
  ResourceSet ForRelease(const ResourceSet& need) const;

  ResourceSet total_;
  ResourceSet available_;
  GpuAllocator gpus_;
  std::map<std::pair<std::string, int>, Bundle> bundles_;  // (group, index) -> bundle
  std::map<std::string, std::string> group_any_;           // "X_group_<G>" -> "X", for live and removed groups
  std::map<std::string, std::string> group_of_;            // every group name given out here -> its group
  std::map<std::string, std::set<std::string>> keys_of_;   // and back
  std::map<std::string, double> lent_;                     // group names lent back by blocked holders
  std::set<std::string> removed_;                           // groups returned for good (the newest kKeepRemoved)
  std::deque<std::string> removed_order_;
  static constexpr size_t kKeepRemoved = 10000;
};

}  // namespace phalanx::scheduler
