// What the node's task and actor managers ask of the rest of the cluster, as
// interfaces given at construction: RemoteNodes (the other raylets: spilling,
// feasibility, SPREAD, remote cancel and kill; the PeerManager implements
// it) and GroupPlacement (where a placement group's bundle is; the
// PlacementGroups implement it); and what the PeerManager asks of this
// node's tasks and actors when other nodes send or settle work
// (ForwardedTasks, NodeActors), so that it too is tested alone
// (tests/cpp/peer_manager_test.cc). Each manager is unit-tested with fakes of
// these (tests/cpp/task_manager_test.cc, actor_manager_test.cc). Not
// thread-safe; the raylet's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "scheduler/resources.h"

namespace phalanx::scheduler {

// A task or actor with hard node affinity to a node not (yet) in this node's
// view (one that has just joined is seen at its first heartbeat here) looks
// again every kAffinityRetryMs for kAffinityLookMs, then fails.
inline constexpr int64_t kAffinityLookMs = 5000;
inline constexpr int64_t kAffinityRetryMs = 100;

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
  // A task or actor creation with a label selector (label_match.h): "" to
  // stay here (this node has the labels and could hold `need`), or a live
  // node that has them (where `need` fits now, if one does); not OK, naming
  // the selector and the nodes' labels, when no live node has them and could
  // hold `need`. (A node without peers: here.)
  virtual Result<std::string> PlaceByLabels(const rpc::TaskSpec& spec, const ResourceSet& need) {
    (void)spec;
    (void)need;
    return std::string();
  }
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

// What the PeerManager asks of this node's task queue (the TaskManager implements it).
class ForwardedTasks {
 public:
  virtual ~ForwardedTasks() = default;
  // A task another node spilled here.
  virtual void Submit(rpc::TaskSpec spec) = 0;
  // Another node cancels a task it spilled here.
  virtual void Cancel(const rpc::CancelTask& m) = 0;
  // A task this node spilled finished there; its results are in `reply`.
  virtual void OnForwardedDone(const std::string& task_id, rpc::ForwardTaskReply reply) = 0;
  // The node running a task spilled from here went away (`reached` false: it was never connected to).
  virtual void OnForwardFailed(const std::string& task_id, const std::string& why, bool reached) = 0;
  // The cluster changed: queued tasks may fit somewhere now.
  virtual void Redispatch() = 0;
  // What this node has in all, and free now.
  virtual const ResourceSet& total() const = 0;
  virtual const ResourceSet& available() const = 0;
};

// What the PeerManager asks of the actors whose home is this node (the ActorManager implements it).
class NodeActors {
 public:
  virtual ~NodeActors() = default;
  // Another node asks to kill an actor here; `done` gets the outcome.
  virtual void Kill(const std::string& actor_id, bool no_restart, std::function<void(const Status&)> done) = 0;
  // Another node died (`why`): the actors it created and placed here share its fate, unless detached.
  virtual void OnNodeDead(const std::string& node_id, const std::string& why) = 0;
  // A detached actor whose host and owner are both gone: re-created from this node.
  virtual void RestartOrphan(const rpc::ActorInfo& info, const std::string& why) = 0;
};

// What the ActorService asks of the actors whose home is this node (the ActorManager implements it).
class ActorRegistry {
 public:
  virtual ~ActorRegistry() = default;
  // Runs `then` once a named actor created here has its name cluster-wide (or lost it); at once if none claims it.
  virtual void WhenNamed(const std::string& name, std::function<void()> then) = 0;
  // NotFound when no live actor created here has that name.
  virtual Result<rpc::GetActorReply> Lookup(const std::string& name) const = 0;
  // Where callers may send the actor's calls directly; `reply` runs once, maybe later.
  virtual void Route(const std::string& actor_id, std::function<void(rpc::ActorRouteReply)> reply) = 0;
  // `done` runs once the kill is done (here, or once the actor's node answered).
  virtual void Kill(const std::string& actor_id, bool no_restart, std::function<void(const Status&)> done) = 0;
  // A client exited: the actors it owns (not detached) end with it.
  virtual void OnClientGone(const std::string& client_id) = 0;
};

// What other nodes have free, as last heard (the PeerManager's view; the placement groups ask it).
class ClusterResources {
 public:
  virtual ~ClusterResources() = default;
  virtual std::vector<std::pair<std::string, ResourceSet>> FreeElsewhere() const = 0;
};

// What a placement group's fate means to this node's tasks (the TaskManager implements it).
class GroupTasks {
 public:
  virtual ~GroupTasks() = default;
  // The group was removed: the tasks here waiting to run in it fail with `why`.
  virtual void FailGroup(const std::string& pg_id, const std::string& why) = 0;
  // Bundles were reserved or given back: look at the queues again.
  virtual void Redispatch() = 0;
};

// ... and to this node's actors (the ActorManager implements it).
class GroupActors {
 public:
  virtual ~GroupActors() = default;
  // The group was removed: its actors here die, not restarted.
  virtual void KillGroup(const std::string& pg_id, const std::string& why) = 0;
};

// The raylet's record of this node in the GCS (the GcsSession implements it;
// placement groups announce what they reserve).
class NodeAnnouncer {
 public:
  virtual ~NodeAnnouncer() = default;
  // Something others should see now changed here (resources reserved or
  // given back): the record is written at the end of this turn of the loop.
  virtual void AnnounceSoon() = 0;
};

// What the node's GCS session asks of the peers (the PeerManager implements it).
class PeerView {
 public:
  virtual ~PeerView() = default;
  // The port other raylets reach this one on.
  virtual int port() const = 0;
  // Reads the node table and heartbeats: updates the view, marks silent nodes dead.
  virtual void Refresh() = 0;
  // Every node's silence counts from now again (the GCS was away: nobody could heartbeat).
  virtual void Forgive() = 0;
  // How many other nodes the view holds alive (the node record carries it:
  // who starts a cluster waits until every raylet sees every other).
  virtual size_t peers_alive() const = 0;
  // How many other nodes the node table holds dead (for the metrics page).
  virtual size_t peers_dead() const { return 0; }
};

// ... and of the actors whose home is this node (the ActorManager implements it).
class ActorCensus {
 public:
  virtual ~ActorCensus() = default;
  virtual size_t num_alive() const = 0;
  // Publishes every actor this node hosts again (the GCS came back).
  virtual void AnnounceAll() = 0;
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
