// ActorManager: the actors whose home is this node. An actor gets a worker
// process of its own and holds its resources for its life. Method calls are
// pushed to that worker as their ref arguments become ready, in the order
// each caller made them (ActorCallQueue), without waiting for each other.
// When the process dies the actor is restarted (constructor re-run) up to
// max_restarts times; the interrupted call is retried up to max_task_retries
// times, queued calls are re-sent. A dead actor fails every pending and
// later call with ActorDied naming it and why it died. Named actors are
// found by name; an actor dies with the client that created it unless it is
// detached. It takes resources from the ResourceLedger and asks the node's
// task table and worker pool through interfaces (scheduler/task_table.h), so
// it knows nothing of the TaskManager that owns it and is unit-tested alone
// (tests/cpp/actor_manager_test.cc). Not thread-safe; the raylet's loop.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "scheduler/actor_call_queue.h"
#include "scheduler/actor_directory.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/resource_ledger.h"
#include "scheduler/resources.h"
#include "scheduler/task_table.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

class ActorManager final : public NodeActors, public ActorRegistry, public GroupActors, public ActorCensus {
 public:
  // `directory`: names, where actors created elsewhere live, and each actor's
  // state (null: names are this node's only, nothing is published);
  // `remote`: other nodes, to place actors on and kill them there (null:
  // this node only); `groups`: where placement groups' bundles are (null:
  // none). All owned by the caller, outliving this.
  ActorManager(TaskTable* tasks, ResourceLedger* ledger, WorkerSource* pool, std::string node_id,
               ActorDirectory* directory = nullptr, RemoteNodes* remote = nullptr, GroupPlacement* groups = nullptr);

  // A creation task was submitted: the actor exists from now on (pending).
  void OnCreationSubmitted(const rpc::TaskSpec& spec, const ResourceSet& need);
  // A method call was submitted; false (and the call failed) if the actor is dead or unknown.
  bool OnMethodSubmitted(const rpc::TaskSpec& spec);
  // The task's ref arguments are ready.
  void OnTaskReady(const rpc::TaskSpec& spec);
  // A call of the actor's that waited in its queue was cancelled: the calls behind it may go.
  void OnCallCancelled(const std::string& actor_id);
  // Places pending actors on idle workers when their resources are free.
  void PlacePending();
  // The actor's worker finished `spec` (creation or method): `done` is its report.
  void OnTaskDone(Worker* w, const rpc::TaskSpec& spec, const rpc::TaskDone& done);
  // Where callers may send the actor's method calls directly (state, node,
  // worker address), from this node's record or else the GCS. `reply` runs
  // once, maybe later.
  void Route(const std::string& actor_id, std::function<void(rpc::ActorRouteReply)> reply) override;
  // `lost` are the task ids the worker had been pushed, oldest first.
  void OnWorkerDied(Worker* w, const std::deque<std::string>& lost, const std::string& why);
  Status Kill(const std::string& actor_id, bool no_restart);
  // The same; `done` runs once the kill is done: at once here, or once the
  // node hosting the actor answered (so that a call made after it fails).
  void Kill(const std::string& actor_id, bool no_restart, std::function<void(const Status&)> done) override;
  // Its placement group was removed: the group's actors here die (no restart).
  void KillGroup(const std::string& pg_id, const std::string& why) override;
  // No node can hold the actor's resources: it dies with `why`.
  void FailInfeasible(const std::string& actor_id, const std::string& why);
  void OnClientGone(const std::string& client_id) override;
  // Every handle of the actor is gone, in every process: the ready object of
  // its creation was freed on this node, where it was created (handles carry
  // that object, so reference counting counts them; each process lets go of
  // it once its own calls are over). An actor that is not detached ends for
  // good, as Ray ends an actor whose handles all went out of scope (named or
  // not: handles got by name do not count, as in Ray).
  void OnHandlesGone(const std::string& actor_id);
  // Another node died. Actors it created and placed here die with it (they
  // share their creator's fate), unless detached: those this node adopts.
  void OnNodeDead(const std::string& node_id, const std::string& why) override;
  // A detached actor whose host and owner are both gone (`info` from the GCS):
  // re-created from this node, per max_restarts. The caller has claimed it.
  void RestartOrphan(const rpc::ActorInfo& info, const std::string& why) override;
  // NotFound when no live actor has that name.
  Result<rpc::GetActorReply> Lookup(const std::string& name) const override;
  // Runs `then` once a named actor created here is known to have its name
  // cluster-wide (or has lost it), at once if none is still claiming it.
  void WhenNamed(const std::string& name, std::function<void()> then) override;

  // Names are unique across the cluster: a named actor created here claims
  // its name in the directory before it is placed, and frees it when it dies.

  // Publishes every actor this node hosts again (the GCS came back).
  void AnnounceAll() override {
    for (const auto& [id, a] : actors_) Announce(a);
  }

  // Actors placed on other nodes: a creation that does not fit here goes
  // where it fits (in a placement group: to its bundle's node), and method
  // calls follow it there.
  // A creation or method call sent to another node finished there.
  void OnRemoteDone(const rpc::TaskSpec& spec);
  // The node hosting the actor went away while `spec` was with it.
  void OnRemoteFailed(const rpc::TaskSpec& spec, const std::string& why);
  // Whether `task_id` belongs to an actor hosted on another node (its results come back through the TaskManager).
  bool IsRemote(const std::string& actor_id) const;
  // The node a call of `actor_id` was sent to (its host), or "" if it was not sent away.
  std::string ForwardedTo(const std::string& actor_id, const std::string& task_id) const;
  size_t num_alive() const override;
  // The client ids of the processes whose death ends actors of this node
  // (creators of live actors that are not detached).
  std::unordered_set<std::string> Owners() const;
  size_t num_pending() const { return pending_.size(); }

 private:
  struct Actor {
    rpc::TaskSpec creation;             // kept to re-run the constructor on restart
    ResourceSet need;
    rpc::ActorState state = rpc::ACTOR_PENDING;
    bool creation_ready = false;        // the constructor's arguments are ready
    bool has_resources = false;
    std::vector<int> gpu_ids;
    std::string remote_node;            // set while another node hosts it
    std::deque<std::string> remote_inflight;  // calls sent to that node, oldest first
    bool proxy = false;                 // created elsewhere: calls are only forwarded from here
    Worker* worker = nullptr;
    int restarts = 0;
    ActorCallQueue calls;               // method calls not pushed yet (in order per caller)
    std::string death_cause;
    bool claiming = false;              // its name is being claimed in the GCS: not placed yet
    bool name_held = false;             // it has its name cluster-wide (freed when it dies)
    int64_t labels_unmet_since = 0;  // (steady ms) no live node had the labels it asks for, since
    int64_t affinity_missed_since = 0;  // (steady ms) its hard affinity's node was not in the view, since
    bool strategy_tried = false;        // SPREAD or node affinity was applied (once: restarts stay here)
    std::vector<std::function<void()>> claim_waiters;  // WhenNamed
    // Where the live worker takes direct calls (set when its constructor returns).
    std::string worker_socket, worker_host;
    int worker_port = 0;
  };
  void Pump(Actor& a);
  // The retries a call has after a death of its actor: its own (.options(max_task_retries=)), else the actor's.
  static int MaxTaskRetries(const Actor& a, const rpc::TaskSpec& call);
  // What a node must have free to take it: its need, and placement_cpus CPUs
  // (Ray's actor that asks for nothing: 1 CPU to place it, none held).
  static ResourceSet PlacementNeed(const Actor& a);
  // Whether this node has the placement_cpus it asks for free now (always,
  // for one another node placed here, or a restart: it stays where it was).
  bool RoomToPlace(const Actor& a) const;
  // Claims the actor's name in the GCS (ClaimName), taking it over from `stale`.
  void Claim(const std::string& actor_id, const std::string& stale);
  void Claimed(Actor& a, bool won, const std::string& why);
  void Die(Actor& a, const std::string& cause);
  // kill(no_restart=False) before its worker started: a death by max_restarts (restarted, or dead past it).
  void KilledBeforeStart(Actor& a);
  // Its creator (process or node) is gone: it dies too, its process killed.
  void DieWithOwner(Actor& a, const std::string& cause);
  void Announce(const Actor& a);
  // Sends a creation that does not fit here to another node (its bundle's, in
  // a placement group); that node, or "" (with *gone_why set when its group can never hold it).
  std::string SpillCreation(const rpc::TaskSpec& forward, const ResourceSet& need, std::string* gone_why);
  // SPREAD and node affinity: sends the creation to its node (true), or
  // leaves it here (false; *why says why it cannot be placed at all: a hard
  // affinity to a node that is not alive).
  // `wait`: no live node has the labels it asks for yet, or its hard
  // affinity's node is not in the view yet (remote_nodes.h kAffinityLookMs):
  // it is looked at again soon (RetrySoon).
  bool PlaceByStrategy(Actor& a, std::string* why, bool* wait);
  // PlacePending runs again in `ms` (one timer for every actor that waits).
  void RetrySoon(int64_t ms);
  std::string Describe(const Actor& a) const;

  TaskTable* tasks_;
  ResourceLedger* ledger_;
  WorkerSource* pool_;
  std::string node_id_;
  std::unordered_map<std::string, Actor> actors_;
  std::unordered_map<std::string, std::string> names_;  // live named actors -> id
  std::deque<std::string> pending_;                     // actors waiting for placement
  bool retry_armed_ = false;  // PlacePending runs again soon (RetrySoon: one timer for all waiting actors)
  ActorDirectory* directory_;
  RemoteNodes* remote_;
  GroupPlacement* groups_;
  void HostLost(Actor& a, std::deque<std::string> lost, const std::string& why);
};

}  // namespace phalanx::scheduler
