#include "scheduler/actor_manager.h"

#include <signal.h>

#include <algorithm>
#include <optional>

#include "core/ids.h"
#include "core/logging.h"
#include "core/status_proto.h"
#include "scheduler/label_placement.h"

namespace phalanx::scheduler {

namespace {
// Ray's words for an actor whose constructor raised, before the constructor's traceback (which
// starts "ray::A.__init__() (pid=...": worker_streams.remote_traceback).
constexpr char kRayTaskTitle[] = "ray::";
const std::string kCreationFailed = "The actor died because of an error raised in its creation task, ";
bool IsCreationFailure(const std::string& cause) { return cause.rfind(kCreationFailed, 0) == 0; }
}  // namespace

namespace {

// Ray's words first (Ray's tests match them), then phalanx's call.
constexpr const char* kKilledCause = "The actor is dead because it was killed by `ray.kill` (phalanx.kill())";
constexpr const char* kOutOfScopeCause =
    "The actor is dead because all references to the actor were removed (every handle of it went out of scope)";

// Its socket closed: it is about to be reported dead. (A worker with no
// connection is a test's stand-in.)
bool SocketClosed(const Worker& w) { return w.conn != nullptr && w.conn->closed(); }
}  // namespace

ActorManager::ActorManager(TaskTable* tasks, ResourceLedger* ledger, WorkerSource* pool, std::string node_id,
                           ActorDirectory* directory, RemoteNodes* remote, GroupPlacement* groups)
    : tasks_(tasks),
      ledger_(ledger),
      pool_(pool),
      node_id_(std::move(node_id)),
      directory_(directory),
      remote_(remote),
      groups_(groups) {}

std::string ActorManager::Describe(const Actor& a) const {
  std::string s = "actor " + a.creation.function_name();
  if (!a.creation.actor_name().empty()) s += " '" + a.creation.actor_name() + "'";
  return s + " (" + ToHex(a.creation.actor_id()).substr(0, 12) + ")";
}

void ActorManager::Announce(const Actor& a) {
  // The node hosting an actor speaks for it; proxies never do.
  if (directory_ == nullptr || a.proxy || !a.remote_node.empty()) return;
  rpc::ActorInfo info;
  info.set_actor_id(a.creation.actor_id());
  info.set_name(a.creation.actor_name());
  info.set_class_name(a.creation.function_name());
  info.set_state(a.state);
  info.set_node_id(node_id_);
  info.set_pid(a.worker ? a.worker->pid : 0);
  info.set_function_id(a.creation.function_id());
  info.set_restarts(a.restarts);
  info.set_death_cause(a.death_cause);
  if (a.state == rpc::ACTOR_ALIVE) {
    info.set_worker_socket(a.worker_socket);
    info.set_worker_host(a.worker_host);
    info.set_worker_port(a.worker_port);
  }
  for (const auto& [k, v] : a.need.amounts()) (*info.mutable_resources())[k] = v;
  info.set_owner_node(a.creation.origin_node().empty() ? node_id_ : a.creation.origin_node());
  info.set_detached(a.creation.detached());
  if (a.creation.detached() && a.state != rpc::ACTOR_DEAD) info.set_creation_spec(a.creation.SerializeAsString());
  directory_->Publish(info);
}

void ActorManager::OnCreationSubmitted(const rpc::TaskSpec& spec, const ResourceSet& need) {
  Actor& a = actors_[spec.actor_id()];
  a.creation = spec;
  a.need = need;
  a.calls.set_unordered(spec.calls_unordered());
  const std::string& name = spec.actor_name();
  if (!name.empty()) {
    if (names_.count(name)) {
      a.state = rpc::ACTOR_DEAD;
      a.death_cause = "an actor named '" + name + "' already exists";
      tasks_->FailTask(spec.task_id(), StatusCode::kActorDied, a.death_cause);
      Announce(a);
      return;
    }
    names_[name] = spec.actor_id();
    // Unique across the cluster too: claimed in the GCS before it is placed
    // (a creation sent here by the node that claimed it has it already).
    if (spec.forwarded() || directory_ == nullptr) {
      a.name_held = directory_ != nullptr;
    } else {
      a.claiming = true;
    }
  }
  Announce(a);
  if (a.claiming) Claim(spec.actor_id(), "");
}

void ActorManager::Claim(const std::string& actor_id, const std::string& stale) {
  const std::string name = actors_[actor_id].creation.actor_name();
  directory_->ClaimName(name, actor_id, stale, [this, actor_id, name](Result<std::string> r) {
    auto it = actors_.find(actor_id);
    bool won = r.ok() && r.value().empty();
    if (it == actors_.end() || it->second.state == rpc::ACTOR_DEAD) {
      if (won) directory_->ReleaseName(name, actor_id);  // (died meanwhile)
      if (it != actors_.end()) Claimed(it->second, false, "");
      return;
    }
    if (!r.ok()) return Claimed(it->second, false, "its name '" + name + "' could not be claimed in the GCS: " +
                                                       r.status().message());
    if (won) return Claimed(it->second, true, "");
    // Another actor has it: taken over if that one is dead (or was never recorded).
    std::string owner = r.value();
    auto lose = [this, actor_id, name](const std::string& where) {
      auto again = actors_.find(actor_id);
      if (again == actors_.end()) return;
      Claimed(again->second, false, "an actor named '" + name + "' already exists" + where);
    };
    directory_->Locate(owner, [this, actor_id, owner, lose](Result<rpc::ActorInfo> info) {
      if (info.ok() && info.value().state() != rpc::ACTOR_DEAD) {
        return lose(" (on node " + ToHex(info.value().node_id()).substr(0, 12) + ")");
      }
      auto again = actors_.find(actor_id);
      if (again == actors_.end() || again->second.state == rpc::ACTOR_DEAD) return;
      Claim(actor_id, owner);
    });
  });
}

void ActorManager::Claimed(Actor& a, bool won, const std::string& why) {
  a.claiming = false;
  auto waiters = std::move(a.claim_waiters);
  a.claim_waiters.clear();
  if (won) {
    a.name_held = true;
    if (a.creation_ready) {
      pending_.push_back(a.creation.actor_id());
      tasks_->Redispatch();
    }
  } else if (a.state != rpc::ACTOR_DEAD) {
    Die(a, why);
  }
  for (auto& w : waiters) w();
}

void ActorManager::WhenNamed(const std::string& name, std::function<void()> then) {
  auto n = names_.find(name);
  if (n != names_.end()) {
    auto it = actors_.find(n->second);
    if (it != actors_.end() && it->second.claiming) return it->second.claim_waiters.push_back(std::move(then));
  }
  then();
}

bool ActorManager::OnMethodSubmitted(const rpc::TaskSpec& spec) {
  auto it = actors_.find(spec.actor_id());
  if (it == actors_.end() && directory_ != nullptr) {
    // Created on another node: find it, then forward calls there, in order.
    Actor& p = actors_[spec.actor_id()];
    p.proxy = true;
    p.creation.set_actor_id(spec.actor_id());
    p.creation.set_function_name(spec.function_name().substr(0, spec.function_name().rfind('.')));
    p.calls.PushBack(spec.caller_id(), spec.task_id());
    std::string id = spec.actor_id();
    directory_->Locate(id, [this, id](Result<rpc::ActorInfo> r) {
      auto found = actors_.find(id);
      if (found == actors_.end()) return;
      Actor& a = found->second;
      if (!r.ok() || r.value().state() == rpc::ACTOR_DEAD) {
        std::string why = r.ok() ? "it is dead: " + r.value().death_cause()
                                 : "no node knows it (" + r.status().message() + ")";
        Die(a, why);
        actors_.erase(id);
        return;
      }
      a.remote_node = r.value().node_id();
      a.state = rpc::ACTOR_ALIVE;
      Pump(a);
    });
    return true;
  }
  if (it == actors_.end()) {
    tasks_->FailTask(spec.task_id(), StatusCode::kActorDied,
                     "method " + spec.method_name() + " called on an actor unknown to this node (" +
                         ToHex(spec.actor_id()).substr(0, 12) + ")");
    return false;
  }
  Actor& a = it->second;
  if (a.state == rpc::ACTOR_DEAD) {
    tasks_->FailTask(spec.task_id(), StatusCode::kActorDied,
                     IsCreationFailure(a.death_cause)
                         ? a.death_cause
                         : Describe(a) + " is dead (" + a.death_cause + "); " + spec.method_name() + " was not run");
    return false;
  }
  int retries = MaxTaskRetries(a, spec);
  if (spec.interrupted() && !a.proxy && a.remote_node.empty()) {
    // Sent straight to the worker, which died before answering: this is a
    // retry, allowed max_task_retries times. (The actor is not dead: it
    // restarts, so the call fails as unavailable, Ray's ActorUnavailableError.)
    if (retries >= 0 && spec.attempt() >= retries) {
      bool unseen = a.state == rpc::ACTOR_ALIVE && a.restarts == spec.incarnation();  // (its death not seen here yet)
      int max = a.creation.max_restarts();
      if (unseen && max >= 0 && a.restarts >= max) {  // that death is its last
        tasks_->FailTask(spec.task_id(), StatusCode::kActorDied,
                         Describe(a) + " died before " + spec.method_name() + " returned (max_restarts=" +
                             std::to_string(max) + ", max_task_retries=" + std::to_string(retries) + ")");
        return false;
      }
      tasks_->FailTask(spec.task_id(), StatusCode::kActorUnavailable,
                       Describe(a) + " is temporarily unavailable: its process died before " + spec.method_name() +
                           " returned (the connection to it broke: RpcError) and the actor " +
                           (unseen ? "is being restarted" : "was restarted") + "; max_task_retries=" +
                           std::to_string(retries) + ", so the call is not retried");
      return false;
    }
    if (rpc::TaskSpec* m = tasks_->MutableSpec(spec.task_id())) m->set_attempt(spec.attempt() + 1);
  } else if (a.state == rpc::ACTOR_RESTARTING && retries == 0 && !a.proxy && a.remote_node.empty()) {
    // Ray's at-most-once calls: one made while the actor restarts is not queued for the new process.
    tasks_->FailTask(spec.task_id(), StatusCode::kActorUnavailable,
                     Describe(a) + " is unavailable: The actor is restarting (max_task_retries=0: " +
                         spec.method_name() + " is not queued for its new process; give the actor or the call "
                         "max_task_retries to have calls wait for it)");
    return false;
  }
  a.calls.PushBack(spec.caller_id(), spec.task_id());
  return true;
}

int ActorManager::MaxTaskRetries(const Actor& a, const rpc::TaskSpec& call) {
  return call.has_call_max_task_retries() ? call.call_max_task_retries() : a.creation.max_task_retries();
}

void ActorManager::Route(const std::string& actor_id, std::function<void(rpc::ActorRouteReply)> reply) {
  auto it = actors_.find(actor_id);
  if (it != actors_.end() && !it->second.proxy && it->second.remote_node.empty()) {
    const Actor& a = it->second;
    rpc::ActorRouteReply r;
    r.set_state(a.state);
    r.set_node_id(node_id_);
    r.set_incarnation(a.restarts);
    if (a.state == rpc::ACTOR_ALIVE && a.worker != nullptr && !SocketClosed(*a.worker)) {
      r.set_worker_socket(a.worker_socket);
      r.set_worker_host(a.worker_host);
      r.set_worker_port(a.worker_port);
    } else if (a.state == rpc::ACTOR_ALIVE) {
      r.set_state(rpc::ACTOR_RESTARTING);  // its worker is going; not a place to send calls
    }
    return reply(std::move(r));
  }
  if (directory_ == nullptr) {
    rpc::ActorRouteReply r;
    *r.mutable_status() = ToProto(Status::NotFound("no actor " + ToHex(actor_id).substr(0, 12)));
    return reply(std::move(r));
  }
  directory_->Locate(actor_id, [reply = std::move(reply)](Result<rpc::ActorInfo> info) {
    rpc::ActorRouteReply r;
    if (!info.ok()) {
      *r.mutable_status() = ToProto(info.status());
      return reply(std::move(r));
    }
    const rpc::ActorInfo& a = info.value();
    r.set_state(a.state());
    r.set_node_id(a.node_id());
    r.set_incarnation(a.restarts());
    r.set_worker_socket(a.worker_socket());
    r.set_worker_host(a.worker_host());
    r.set_worker_port(a.worker_port());
    reply(std::move(r));
  });
}

void ActorManager::OnTaskReady(const rpc::TaskSpec& spec) {
  auto it = actors_.find(spec.actor_id());
  if (it == actors_.end()) return;
  Actor& a = it->second;
  if (spec.kind() == rpc::TASK_ACTOR_CREATION) {
    if (a.state == rpc::ACTOR_DEAD) return;
    a.creation_ready = true;
    if (a.claiming) return;  // placed once it has its name
    pending_.push_back(spec.actor_id());
    return;  // the TaskManager dispatches next, which places it
  }
  a.calls.MarkReady(spec.task_id());
  Pump(a);
}

void ActorManager::OnCallCancelled(const std::string& actor_id) {
  auto it = actors_.find(actor_id);
  if (it != actors_.end()) Pump(it->second);
}

void ActorManager::PlacePending() {
  std::optional<std::unordered_set<std::string>> owners;  // (made when a worker is first needed)
  std::vector<std::pair<std::string, std::string>> unplaceable;  // (actor, why): failed once the queue was walked
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto found = actors_.find(*it);
    if (found == actors_.end() || found->second.state == rpc::ACTOR_DEAD) {
      it = pending_.erase(it);
      continue;
    }
    Actor& a = found->second;
    if (!a.has_resources && !a.strategy_tried) {
      a.strategy_tried = true;
      std::string why;
      bool wait = false;
      if (PlaceByStrategy(a, &why, &wait)) {
        it = pending_.erase(it);
        continue;
      }
      if (wait) {  // (no live node has its labels yet: looked at again soon)
        ++it;
        continue;
      }
      if (!why.empty()) {
        unplaceable.emplace_back(a.creation.actor_id(), why);
        ++it;
        continue;
      }
    }
    if (!a.has_resources) {
      if (!RoomToPlace(a) || !ledger_->TryAcquire(a.need, &a.gpu_ids)) {
        rpc::TaskSpec forward;
        if (remote_ != nullptr && !a.creation.forwarded() &&
            tasks_->BuildForwardSpec(a.creation.task_id(), &forward)) {
          std::string gone_why;
          std::string node = SpillCreation(forward, PlacementNeed(a), &gone_why);
          if (!gone_why.empty()) unplaceable.emplace_back(a.creation.actor_id(), "it cannot be placed: " + gone_why);
          if (!node.empty()) {
            a.remote_node = node;
            a.remote_inflight.push_back(a.creation.task_id());
            it = pending_.erase(it);
            continue;
          }
        }
        ++it;
        continue;
      }
      a.has_resources = true;
    }
    WorkerKind kind = WorkerKind::Of(a.creation);
    // Not the process of a creator of live actors: killing this actor would end them too.
    if (!owners) owners = Owners();
    Worker* w = pool_->PopIdleIf(kind, [&](const Worker& c) { return owners->count(c.client_id) == 0; });
    if (w == nullptr) {
      if (pool_->num_starting(kind) == 0) pool_->StartWorker(kind);
      break;  // placed when a worker registers
    }
    w->actor_id = a.creation.actor_id();
    w->gpu_ids = a.gpu_ids;
    a.worker = w;
    it = pending_.erase(it);
    // The creation's attempt is the actor's restarts: the constructor reads it as Ray's
    // was_current_actor_reconstructed.
    if (rpc::TaskSpec* m = tasks_->MutableSpec(a.creation.task_id())) m->set_attempt(a.restarts);
    tasks_->PushTo(w, a.creation.task_id());
    Announce(a);
  }
  for (const auto& [actor, why] : unplaceable) FailInfeasible(actor, why);
}

bool ActorManager::PlaceByStrategy(Actor& a, std::string* why, bool* wait) {
  const rpc::TaskSpec& c = a.creation;
  if (remote_ == nullptr || c.forwarded()) return false;
  std::string node;
  if (PlacedByLabels(c)) {
    LabelPlacement p = PlaceByLabels(*remote_, c, a.need, tasks_->infeasible_timeout_ms(), &a.labels_unmet_since);
    if (p.kind == LabelPlacement::kFail) {
      *why = p.why;
      return false;
    }
    if (p.kind == LabelPlacement::kWait) {  // looked at again while a node with the labels may join
      a.strategy_tried = false;
      *wait = true;
      RetrySoon(LabelPlacement::kRetryMs);
      return false;
    }
    node = p.node;
    if (node.empty()) return false;  // here
  } else if (c.strategy() == rpc::STRATEGY_NODE_AFFINITY) {
    node = c.affinity_node();
  } else if (c.strategy() == rpc::STRATEGY_SPREAD) {
    node = remote_->NextSpreadNode();
  }
  if (node.empty() || node == node_id_) return false;
  rpc::TaskSpec forward;
  if (!tasks_->BuildForwardSpec(c.task_id(), &forward)) return false;
  if (remote_->SpillTo(node, forward)) {
    a.remote_node = node;
    a.remote_inflight.push_back(c.task_id());
    return true;
  }
  if (c.strategy() == rpc::STRATEGY_NODE_AFFINITY && !c.affinity_soft()) {
    // A node that has just joined reaches this node's view at its first
    // heartbeat here: look again for a while before failing.
    if (StillLooking(&a.affinity_missed_since, kAffinityLookMs)) {
      a.strategy_tried = false;
      *wait = true;
      RetrySoon(kAffinityRetryMs);
      return false;
    }
    *why = "it must run on node " + ToHex(node).substr(0, 12) + " (hard node affinity), which is not alive";
  }
  return false;
}

void ActorManager::RetrySoon(int64_t ms) {
  if (retry_armed_) return;  // (one timer for every actor that waits: each PlacePending looks at all)
  retry_armed_ = true;
  tasks_->After(ms, [this] {
    retry_armed_ = false;
    PlacePending();
  });
}

ResourceSet ActorManager::PlacementNeed(const Actor& a) {
  ResourceSet place = a.need;
  if (a.creation.placement_cpus() > 0) place.Set("CPU", std::max(place.Get("CPU"), a.creation.placement_cpus()));
  return place;
}

bool ActorManager::RoomToPlace(const Actor& a) const {
  // (one sent here by another node was placed there: it starts here whatever came since)
  if (a.creation.placement_cpus() <= 0 || a.creation.forwarded() || a.restarts > 0) return true;
  return ledger_->available().Get("CPU") + 1e-9 >= a.creation.placement_cpus();
}

std::string ActorManager::SpillCreation(const rpc::TaskSpec& forward, const ResourceSet& need,
                                        std::string* gone_why) {
  if (forward.strategy() != rpc::STRATEGY_PLACEMENT_GROUP) return remote_->Spill(forward, need);
  // In a placement group: to its bundle's node, once the group is placed.
  if (groups_ == nullptr) return "";
  BundleWhere where = groups_->Locate(forward.placement_group_id(), forward.bundle_index(), PlainNeed(forward));
  if (where.kind == BundleWhere::kGone) {
    *gone_why = where.why;
    return "";
  }
  if (where.kind != BundleWhere::kNode || where.node.empty() || where.node == node_id_) return "";
  return remote_->SpillTo(where.node, forward) ? where.node : "";
}

void ActorManager::Pump(Actor& a) {
  // A call cancelled while queued (phalanx.cancel) is no longer a task: it is skipped.
  auto live = [&](const std::string& tid) { return tasks_->HasTask(tid); };
  if (a.state == rpc::ACTOR_ALIVE && !a.remote_node.empty()) {
    a.calls.Drain(live, [&](const std::string& tid) {
      rpc::TaskSpec forward;
      if (!tasks_->BuildForwardSpec(tid, &forward)) {
        tasks_->FailTask(tid, StatusCode::kInvalidArgument,
                         Describe(a) + " runs on another node, and an argument of this call is lost");
        return true;
      }
      a.remote_inflight.push_back(tid);
      if (remote_ == nullptr || !remote_->SpillTo(a.remote_node, forward)) {
        auto lost = std::move(a.remote_inflight);
        a.remote_inflight.clear();
        HostLost(a, std::move(lost), "node " + ToHex(a.remote_node).substr(0, 12) + " is not alive");
        return false;
      }
      return true;
    });
    return;
  }
  // A worker whose socket closed is about to be reported dead: calls wait for the restart.
  if (a.state != rpc::ACTOR_ALIVE || a.worker == nullptr || SocketClosed(*a.worker)) return;
  a.calls.Drain(live, [&](const std::string& tid) {
    tasks_->PushTo(a.worker, tid);
    return true;
  });
}

void ActorManager::OnTaskDone(Worker* w, const rpc::TaskSpec& spec, const rpc::TaskDone& done) {
  auto it = actors_.find(w->actor_id);
  if (it == actors_.end()) return;
  Actor& a = it->second;
  const std::string& error = done.error();
  if (spec.kind() != rpc::TASK_ACTOR_CREATION) {
    tasks_->FinishTask(spec.task_id(), error.empty(), error);
    return;
  }
  if (!error.empty()) {  // the constructor raised: the actor never lived
    // (a Python worker reports the constructor's traceback as Ray's RayTaskError text: Ray's words then)
    Die(a, error.rfind(kRayTaskTitle, 0) == 0 ? kCreationFailed + error : "its constructor raised " + error);
    return;
  }
  a.worker_socket = done.direct_socket();
  a.worker_host = done.direct_host();
  a.worker_port = done.direct_port();
  a.state = rpc::ACTOR_ALIVE;
  Announce(a);
  Pump(a);
}

void ActorManager::OnWorkerDied(Worker* w, const std::deque<std::string>& lost, const std::string& why) {
  auto it = actors_.find(w->actor_id);
  if (it == actors_.end()) return;
  Actor& a = it->second;
  a.worker = nullptr;
  a.worker_socket.clear();
  a.worker_host.clear();
  a.worker_port = 0;
  int max = a.creation.max_restarts();
  bool stays_dead = a.state == rpc::ACTOR_DEAD || (max >= 0 && a.restarts >= max);
  std::string final_why = a.state == rpc::ACTOR_DEAD ? a.death_cause
                          : max > 0 ? why + " (restarted " + std::to_string(a.restarts) +
                                          " times, max_restarts=" + std::to_string(max) + ")"
                                    : why + " (max_restarts=0)";
  // Calls pushed but not finished go back to the front of the queue, in order;
  // the one that was running counts an attempt.
  std::vector<std::string> back;
  bool first = true;
  for (const auto& tid : lost) {
    rpc::TaskSpec* spec = tasks_->MutableSpec(tid);
    if (spec == nullptr || spec->kind() == rpc::TASK_ACTOR_CREATION) {
      first = false;
      continue;
    }
    if (spec->interrupted() && spec->incarnation() == a.restarts) {
      // Handed back by a caller that saw this same death first: counted then.
      first = false;
      back.push_back(tid);
      continue;
    }
    if (first) {
      first = false;
      int retries = MaxTaskRetries(a, *spec);
      if (stays_dead || (retries >= 0 && spec->attempt() >= retries)) {
        // (restarting: unavailable, Ray's ActorUnavailableError; past max_restarts: dead)
        tasks_->FailTask(tid, stays_dead ? StatusCode::kActorDied : StatusCode::kActorUnavailable,
                         Describe(a) + " died while running " + spec->method_name() + ": " +
                             (stays_dead ? final_why : why + " (max_task_retries=" + std::to_string(retries) +
                                                           "; the actor is being restarted)"));
        continue;
      }
      spec->set_attempt(spec->attempt() + 1);
    }
    back.push_back(tid);
  }
  for (auto r = back.rbegin(); r != back.rend(); ++r) {
    const rpc::TaskSpec* spec = tasks_->MutableSpec(*r);
    a.calls.PushFront(spec != nullptr ? spec->caller_id() : std::string(), *r);
  }
  if (stays_dead) {
    Die(a, final_why);
    return;
  }
  ++a.restarts;
  a.state = rpc::ACTOR_RESTARTING;
  PHALANX_LOG(Warning) << "restarting " << Describe(a) << " (" << a.restarts << "): " << why;
  pending_.push_back(a.creation.actor_id());
  Announce(a);
  tasks_->Redispatch();
}

void ActorManager::Die(Actor& a, const std::string& cause) {
  a.state = rpc::ACTOR_DEAD;
  a.death_cause = cause;
  std::string msg = IsCreationFailure(cause) ? cause : Describe(a) + " is dead: " + cause;
  for (const auto& tid : a.calls.TakeAll()) tasks_->FailTask(tid, StatusCode::kActorDied, msg);
  if (a.has_resources) {
    ledger_->Release(a.need, a.gpu_ids);
    a.gpu_ids.clear();
    a.has_resources = false;
  }
  if (a.worker != nullptr) {
    Worker* w = a.worker;
    a.worker = nullptr;
    if (w->pid > 0) ::kill(w->pid, SIGKILL);  // its death is reported later and finds the actor dead
  }
  if (!a.proxy) {
    // The constructor's arguments are released now; its marker object fails if it never ran.
    tasks_->FailTask(a.creation.task_id(), StatusCode::kActorDied, msg);
    tasks_->FinishTask(a.creation.task_id(), false, cause);
  }
  auto n = names_.find(a.creation.actor_name());
  if (n != names_.end() && n->second == a.creation.actor_id()) names_.erase(n);
  if (a.name_held && directory_ != nullptr) directory_->ReleaseName(a.creation.actor_name(), a.creation.actor_id());
  a.name_held = false;
  Announce(a);
  tasks_->Redispatch();
}

std::string ActorManager::ForwardedTo(const std::string& actor_id, const std::string& task_id) const {
  auto it = actors_.find(actor_id);
  if (it == actors_.end() || it->second.remote_node.empty()) return "";
  const auto& sent = it->second.remote_inflight;
  return std::find(sent.begin(), sent.end(), task_id) == sent.end() ? "" : it->second.remote_node;
}

bool ActorManager::IsRemote(const std::string& actor_id) const {
  auto it = actors_.find(actor_id);
  return it != actors_.end() && !it->second.remote_node.empty();
}

void ActorManager::OnRemoteDone(const rpc::TaskSpec& spec) {
  auto it = actors_.find(spec.actor_id());
  if (it == actors_.end()) return;
  Actor& a = it->second;
  auto pos = std::find(a.remote_inflight.begin(), a.remote_inflight.end(), spec.task_id());
  if (pos != a.remote_inflight.end()) a.remote_inflight.erase(pos);
  if (spec.kind() == rpc::TASK_ACTOR_CREATION && a.state != rpc::ACTOR_DEAD) {
    a.state = rpc::ACTOR_ALIVE;
    Pump(a);
  }
}

void ActorManager::OnRemoteFailed(const rpc::TaskSpec& spec, const std::string& why) {
  auto it = actors_.find(spec.actor_id());
  if (it == actors_.end() || it->second.remote_node.empty()) return;
  Actor& a = it->second;
  auto lost = std::move(a.remote_inflight);
  a.remote_inflight.clear();
  HostLost(a, std::move(lost), why);
}

void ActorManager::HostLost(Actor& a, std::deque<std::string> lost, const std::string& why) {
  if (a.proxy) {  // not ours to restart: fail what was sent, and look it up again next time
    std::string id = a.creation.actor_id();
    std::string msg = Describe(a) + " became unreachable: " + why;
    for (const auto& tid : lost) tasks_->FailTask(tid, StatusCode::kActorDied, msg);
    for (const auto& tid : a.calls.TakeAll()) tasks_->FailTask(tid, StatusCode::kActorDied, msg);
    actors_.erase(id);
    return;
  }
  // As if its worker died here: the same retry and restart rules.
  a.remote_node.clear();
  Worker ghost;  // stands for the process on the lost node; never signalled (pid 0)
  ghost.actor_id = a.creation.actor_id();
  OnWorkerDied(&ghost, lost, why);
}

Status ActorManager::Kill(const std::string& actor_id, bool no_restart) {
  auto out = std::make_shared<Status>();  // (a kill on another node answers later: OK now)
  Kill(actor_id, no_restart, [out](const Status& st) { *out = st; });
  return *out;
}

void ActorManager::Kill(const std::string& actor_id, bool no_restart, std::function<void(const Status&)> done) {
  auto it = actors_.find(actor_id);
  if (it == actors_.end() && directory_ != nullptr && remote_ != nullptr) {  // created elsewhere: find its node
    directory_->Locate(actor_id, [this, actor_id, no_restart, done](Result<rpc::ActorInfo> r) {
      if (!r.ok() || r.value().state() == rpc::ACTOR_DEAD) return done(Status::OK());
      remote_->KillActor(r.value().node_id(), actor_id, no_restart, done);
    });
    return;
  }
  if (it == actors_.end()) return done(Status::NotFound("no actor " + ToHex(actor_id) + " on this node"));
  Actor& a = it->second;
  if (a.state == rpc::ACTOR_DEAD) return done(Status::OK());
  if (!a.remote_node.empty()) {  // hosted elsewhere: that node kills it and answers later calls
    if (remote_ == nullptr) return done(Status::OK());
    return remote_->KillActor(a.remote_node, actor_id, no_restart, done);
  }
  if (no_restart) {
    if (a.worker == nullptr) {
      Die(a, kKilledCause);
      return done(Status::OK());
    }
    a.state = rpc::ACTOR_DEAD;
    a.death_cause = kKilledCause;
  }
  if (a.worker == nullptr) {  // not started yet: the kill counts as a death, as Ray counts it
    KilledBeforeStart(a);
    return done(Status::OK());
  }
  if (a.worker->pid > 0) ::kill(a.worker->pid, SIGKILL);
  done(Status::OK());
}

void ActorManager::KilledBeforeStart(Actor& a) {
  int max = a.creation.max_restarts();
  if (max >= 0 && a.restarts >= max) {
    Die(a, max > 0 ? std::string(kKilledCause) + " (restarted " + std::to_string(a.restarts) +
                         " times, max_restarts=" + std::to_string(max) + ")"
                   : std::string(kKilledCause) + " (max_restarts=0)");
    return;
  }
  ++a.restarts;  // its creation stays where it waits: the restart is that creation
  a.state = rpc::ACTOR_RESTARTING;
  PHALANX_LOG(Warning) << "restarting " << Describe(a) << " (" << a.restarts
                       << "): killed by phalanx.kill() before it started";
  Announce(a);
}

void ActorManager::KillGroup(const std::string& pg_id, const std::string& why) {
  for (auto& [id, a] : actors_) {
    if (a.state == rpc::ACTOR_DEAD || a.creation.placement_group_id() != pg_id || !a.remote_node.empty()) continue;
    if (a.worker == nullptr) {
      Die(a, why);
      continue;
    }
    a.state = rpc::ACTOR_DEAD;
    a.death_cause = why;
    if (a.worker->pid > 0) ::kill(a.worker->pid, SIGKILL);
  }
}

void ActorManager::FailInfeasible(const std::string& actor_id, const std::string& why) {
  auto it = actors_.find(actor_id);
  if (it != actors_.end() && it->second.state != rpc::ACTOR_DEAD) Die(it->second, why);
}

void ActorManager::OnClientGone(const std::string& client_id) {
  std::vector<std::string> doomed;
  for (auto& [id, a] : actors_) {
    if (a.state != rpc::ACTOR_DEAD && !a.creation.detached() && a.creation.caller_id() == client_id) {
      doomed.push_back(id);
    }
  }
  for (const auto& id : doomed) DieWithOwner(actors_[id], "the process that created it exited");
}

std::unordered_set<std::string> ActorManager::Owners() const {
  std::unordered_set<std::string> owners;
  for (const auto& [id, a] : actors_) {
    if (a.state != rpc::ACTOR_DEAD && !a.creation.detached() && !a.creation.caller_id().empty()) {
      owners.insert(a.creation.caller_id());
    }
  }
  return owners;
}

void ActorManager::OnHandlesGone(const std::string& actor_id) {
  auto it = actors_.find(actor_id);
  if (it == actors_.end()) return;  // (the first return of a plain task)
  Actor& a = it->second;
  const rpc::TaskSpec& c = a.creation;
  bool created_here = !a.proxy && !c.forwarded() && c.origin_node().empty();
  if (!created_here || a.state == rpc::ACTOR_DEAD || c.detached()) return;
  if (!a.remote_node.empty()) {  // hosted elsewhere: that node ends it
    if (remote_ != nullptr) remote_->KillActor(a.remote_node, actor_id, true, [](const Status&) {});
    return;
  }
  DieWithOwner(a, kOutOfScopeCause);
}

void ActorManager::DieWithOwner(Actor& a, const std::string& cause) {
  a.death_cause = cause;
  if (a.worker == nullptr) return Die(a, cause);
  a.state = rpc::ACTOR_DEAD;  // its process's death, reported later, finds it dead
  if (a.worker->pid > 0) ::kill(a.worker->pid, SIGKILL);
}

void ActorManager::RestartOrphan(const rpc::ActorInfo& info, const std::string& why) {
  rpc::TaskSpec spec;
  if (actors_.count(info.actor_id()) || !spec.ParseFromString(info.creation_spec())) return;
  spec.clear_forwarded();
  spec.clear_origin_node();
  int max = spec.max_restarts();
  std::string cause;
  if (max >= 0 && info.restarts() >= max) {
    cause = why + " (restarted " + std::to_string(info.restarts()) + " times, max_restarts=" + std::to_string(max) +
            ")";
  }
  for (const auto& a : spec.args()) {
    if (!a.object_id().empty() && cause.empty()) {
      cause = why + "; its constructor's arguments were objects on nodes that are gone";
    }
  }
  if (!cause.empty()) {
    rpc::ActorInfo dead = info;
    dead.set_state(rpc::ACTOR_DEAD);
    dead.set_death_cause(cause);
    dead.clear_creation_spec();
    if (directory_ != nullptr) directory_->Publish(dead);
    return;
  }
  PHALANX_LOG(Warning) << "restarting detached actor " << spec.function_name() << " ("
                       << ToHex(info.actor_id()).substr(0, 12) << ") here: " << why;
  tasks_->Submit(spec);  // its creation, as if submitted here
  auto it = actors_.find(info.actor_id());
  if (it == actors_.end()) return;
  it->second.restarts = info.restarts() + 1;
  Announce(it->second);
}

void ActorManager::OnNodeDead(const std::string& node_id, const std::string& why) {
  std::vector<std::string> doomed;
  for (auto& [id, a] : actors_) {
    if (a.proxy || a.state == rpc::ACTOR_DEAD || a.creation.origin_node() != node_id) continue;
    if (a.creation.detached()) {
      // Nobody else will restart it now: this node is its home from here on.
      a.creation.clear_origin_node();
      PHALANX_LOG(Info) << "adopting detached " << Describe(a) << ": the node that created it is gone (" << why << ")";
      Announce(a);  // the GCS now names this node its owner
      continue;
    }
    doomed.push_back(id);
  }
  for (const auto& id : doomed) DieWithOwner(actors_[id], "the node that created it died (" + why + ")");
}

Result<rpc::GetActorReply> ActorManager::Lookup(const std::string& name) const {
  auto n = names_.find(name);
  if (n == names_.end()) return Status::NotFound("no live actor named '" + name + "'");
  const Actor& a = actors_.at(n->second);
  rpc::GetActorReply r;
  r.set_actor_id(a.creation.actor_id());
  r.set_function_id(a.creation.function_id());
  r.set_class_name(a.creation.function_name());
  r.set_state(a.state);
  return r;
}

size_t ActorManager::num_alive() const {
  size_t n = 0;
  for (const auto& [id, a] : actors_) n += a.state == rpc::ACTOR_ALIVE ? 1 : 0;
  return n;
}

}  // namespace phalanx::scheduler
