// PlacementGroups: bundles of resources reserved together across nodes, as
// Ray's placement groups. The raylet of the client that creates a group is
// its coordinator: it picks a node for each bundle by the group's strategy
// (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD) from what each node has free,
// then reserves them in two phases: BUNDLE_PREPARE to every chosen node (each
// sets the bundle aside in its ResourceLedger, or says what is short), and
// only when all said yes BUNDLE_COMMIT (the bundle's resources become the
// group's there); one refusal returns the prepared ones (BUNDLE_RETURN) and
// the group waits and tries again. The group's record (state, where each
// bundle is, why it is still pending) is in the GCS, where any raylet finds
// it to place a task in one of its bundles. When a node holding bundles
// dies, those bundles are placed again (RESCHEDULING, then CREATED).
//
// Every effect outside this class goes through a GroupHost given at
// construction, so it is unit-tested with a fake (tests/cpp/placement_groups_test.cc). Not thread-safe; lives on
// the raylet's loop.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/resource_ledger.h"

namespace phalanx::scheduler {

// What the PlacementGroups ask of the rest of the raylet (PlacementService).
class GroupHost {
 public:
  virtual ~GroupHost() = default;
  // The other live nodes and what they have free, as last heard.
  virtual std::vector<std::pair<std::string, ResourceSet>> Others() = 0;
  // Sends BUNDLE_PREPARE / COMMIT / RETURN to another node; `done` gets its answer.
  virtual void SendBundleOp(const std::string& node, rpc::MessageType type, const rpc::BundleOp& op,
                            std::function<void(const Status&)> done) = 0;
  // Writes the group's record to the GCS.
  virtual void Publish(const rpc::PlacementGroupInfo& info) = 0;
  // Deletes the record of a group removed long enough ago.
  virtual void Forget(const std::string& pg_id) = 0;
  // Reads a group's record from the GCS.
  virtual void Fetch(const std::string& pg_id, std::function<void(Result<rpc::PlacementGroupInfo>)> cb) = 0;
  // The group is placed (its ready object can be sealed; waiting work can go).
  virtual void Created(const rpc::PlacementGroupInfo& info) = 0;
  // The group was removed (`why`); its bundles here were given back.
  virtual void Removed(const rpc::PlacementGroupInfo& info, const std::string& why) = 0;
  // This node's bundles of a group were returned (kill its actors, fail its tasks here).
  virtual void ReturnedHere(const std::string& pg_id) = 0;
  // Runs `fn` after `delay` on the raylet's loop.
  virtual void After(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
  // Something placement-related changed here (work held for a group may go now).
  virtual void Changed() = 0;
};

class PlacementGroups final : public GroupPlacement {
 public:
  // `self`: this node's id; `ledger`: its resources; both, and `host`, outlive this.
  PlacementGroups(std::string self, ResourceLedger* ledger, GroupHost* host)
      : self_(std::move(self)), ledger_(ledger), host_(host) {}

  // Checks a new group (InvalidArgument says what is wrong) and starts placing it.
  Status Create(rpc::PlacementGroupInfo info);
  // Removes a group coordinated here; NotFound if it is not.
  Status Remove(const std::string& pg_id);
  // The record of a group coordinated here, or nullptr.
  const rpc::PlacementGroupInfo* Find(const std::string& pg_id) const;
  bool Coordinates(const std::string& pg_id) const { return groups_.count(pg_id) > 0; }
  // Each group coordinated here.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [id, g] : groups_) fn(g.info);
  }

  // Where a task or actor in bundle `index` (-1: any) of `pg_id` must go.
  using Where = BundleWhere;
  // kWait: not placed yet (or not known here yet: it is looked up, and
  // `changed` runs when that brings news).
  // kGone too when `need` (plain names) is more than the bundle holds (or than every bundle, for -1).
  Where Locate(const std::string& pg_id, int index, const ResourceSet& need) override;
  Where Locate(const std::string& pg_id, int index) { return Locate(pg_id, index, ResourceSet()); }

  // A client exited: the groups it created (not detached) are removed, as in Ray.
  void OnClientGone(const std::string& client_id);
  // A node died: the bundles it held are placed again.
  void OnNodeDead(const std::string& node_id);
  // BUNDLE_PREPARE / BUNDLE_COMMIT / BUNDLE_RETURN from a coordinator (this node's too).
  Status OnBundleOp(rpc::MessageType type, const rpc::BundleOp& op);

  // How long a group that cannot be placed waits before trying again.
  static constexpr std::chrono::milliseconds kRetry{200};
  // Records of removed groups kept in the GCS (for placement_group_table), the newest.
  static constexpr size_t kKeepRemoved = 1000;

 private:
  struct Group {
    rpc::PlacementGroupInfo info;
    uint64_t attempt = 0;       // ignores answers to an older attempt
    bool in_flight = false;     // a reservation is under way
    bool retry_queued = false;
  };
  // Chooses nodes for the bundles not placed yet: index -> node; false (and `why`) if it cannot now.
  bool Plan(const Group& g, std::map<int, std::string>* plan, std::string* why) const;
  void Schedule(const std::string& pg_id);
  void RetryLater(const std::string& pg_id);
  void Send(const std::string& node, rpc::MessageType type, const rpc::BundleOp& op,
            std::function<void(const Status&)> done);
  void Prepared(const std::string& pg_id, uint64_t attempt, std::map<int, std::string> plan,
                std::map<int, Status> answers);
  void Publish(const Group& g);
  std::string Describe(const rpc::PlacementGroupInfo& info) const;

  std::string self_;
  ResourceLedger* ledger_;
  GroupHost* host_;
  std::map<std::string, Group> groups_;                       // coordinated here
  std::map<std::string, rpc::PlacementGroupInfo> known_;      // others', from the GCS
  std::set<std::string> looking_up_;                          // fetches in flight
  std::deque<std::string> removed_;                           // removed here, oldest first (kKeepRemoved)
};

// The strategy's name as Ray spells it.
const char* StrategyName(rpc::PlacementStrategy s);

}  // namespace phalanx::scheduler
