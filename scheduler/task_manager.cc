#include "scheduler/task_manager.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "core/ids.h"
#include "core/logging.h"
#include "core/trace.h"
#include "scheduler/label_match.h"
#include "scheduler/label_placement.h"

namespace phalanx::scheduler {

TaskManager::TaskManager(boost::asio::io_context& io, objectstore::ObjectTable* objects, WorkerPoolView* pool,
                         ResourceLedger* ledger, ActorManager* actors, TaskEvents* events, RemoteNodes* remote,
                         GroupPlacement* groups, TaskManagerOptions options, std::string node_id)
    : io_(io),
      objects_(objects),
      pool_(pool),
      ledger_(ledger),
      actors_(actors),
      options_(std::move(options)),
      events_(events),
      remote_(remote),
      groups_(groups),
      node_id_(std::move(node_id)),
      lineage_(options_.lineage_max_bytes, [this](std::vector<std::string> held) { ReleaseHeld(std::move(held)); }) {}


rpc::TaskSpec* TaskManager::MutableSpec(const std::string& task_id) {
  auto it = tasks_.find(task_id);
  return it == tasks_.end() ? nullptr : &it->second.spec;
}

void TaskManager::Submit(rpc::TaskSpec spec) {
  std::string tid = spec.task_id();
  if (tasks_.count(tid)) {
    PHALANX_LOG(Warning) << "duplicate task id " << ToHex(tid) << " ignored";
    return;
  }
  if (spec.kind() != rpc::TASK_ACTOR_METHOD) {
    Status can = pool_->CanStart(spec.language());
    if (!can.ok()) {  // (what runs is this node's configuration, never the task's)
      for (int i = 1; i <= spec.num_returns(); ++i) {
        objects_->MarkLost(MakeObjectId(tid, static_cast<uint32_t>(i)), StatusCode::kInvalidArgument,
                           "cannot run " + spec.function_name() + ": " + can.message());
      }
      return;
    }
  }
  Task& t = tasks_[tid];
  if (trace::ProcessRing() != nullptr) t.queued_ns = trace::NowNs();
  t.need.Set("CPU", spec.num_cpus());
  if (spec.language() != rpc::LANGUAGE_PYTHON) t.need.Set("lang:" + std::to_string(spec.language()), 0);  // its own queue
  if (spec.has_runtime_env() && spec.kind() != rpc::TASK_ACTOR_METHOD) {  // its own queue, and its own workers
    t.need.Set("env:" + std::to_string(std::hash<std::string>()(spec.runtime_env().SerializeAsString())), 0);
  }
  for (const auto& [k, v] : spec.resources()) {
    if (v > 0) t.need.Set(k, v);
  }
  if (spec.strategy() == rpc::STRATEGY_PLACEMENT_GROUP) {  // from its bundle, under the group's names
    t.need = ResourceLedger::InBundle(t.need, spec.placement_group_id(), spec.bundle_index());
  }
  t.spec = std::move(spec);
  if (t.spec.depth() == 0 && !t.spec.parent_task_id().empty()) {  // (a forwarded one keeps its own)
    auto parent = tasks_.find(t.spec.parent_task_id());
    if (parent != tasks_.end()) t.spec.set_depth(parent->second.spec.depth() + 1);
  }
  // A call to an actor known to live on another node: an argument made on
  // some node other than this one is copied by the actor's node (from where
  // it is; none at all when it was made there), not copied here first. (One
  // of this node's, spilled, is read back here: the other node copies it.)
  bool forwarded_call = t.spec.kind() == rpc::TASK_ACTOR_METHOD && actors_->IsRemote(t.spec.actor_id());
  std::vector<std::string> deps;
  for (const auto& a : t.spec.args()) {
    if (a.object_id().empty()) continue;
    objects_->AddRef(a.object_id());
    if (!objects_->IsResident(a.object_id())) deps.push_back(a.object_id());  // (a spilled one is read back)
  }
  for (const auto& c : t.spec.contained_ids()) objects_->AddRef(c);
  ++stats_.queued;
  rpc::TaskKind kind = t.spec.kind();
  if (kind == rpc::TASK_ACTOR_CREATION) {
    actors_->OnCreationSubmitted(t.spec, t.need);
    if (!tasks_.count(tid)) return;  // refused (a duplicate name)
  } else if (kind == rpc::TASK_ACTOR_METHOD) {
    if (!actors_->OnMethodSubmitted(t.spec)) return;
  }
  // (In a placement group: it waits for the group, which says why it is not placed.)
  if (kind != rpc::TASK_ACTOR_METHOD && t.spec.strategy() != rpc::STRATEGY_PLACEMENT_GROUP && !Feasible(t.need)) {
    WatchInfeasible(tid);
    if (!tasks_.count(tid)) return;
  }
  t.deps_left = static_cast<int>(deps.size());
  if (deps.empty()) {
    BecomeReady(tid);
    return;
  }
  for (const auto& d : deps) {
    auto one_less = [this, tid] {
      auto it = tasks_.find(tid);
      if (it == tasks_.end()) return;
      if (--it->second.deps_left == 0) BecomeReady(tid);
    };
    if (forwarded_call && !objects_->IsReady(d)) {
      objects_->OnLocated(d, std::move(one_less));
    } else {
      objects_->OnResident(d, std::move(one_less));
    }
  }
}

void TaskManager::BecomeReady(const std::string& tid) {
  Task& t = tasks_[tid];
  const rpc::TaskSpec& spec = t.spec;
  if (spec.kind() == rpc::TASK_NORMAL) {
    ready_[KeyOf(t)].push_back(tid);
    ++num_ready_;
  } else {
    actors_->OnTaskReady(spec);
  }
  Dispatch();
}

size_t TaskManager::SoftWorkerLimit() const {
  size_t cpus = static_cast<size_t>(std::ceil(ledger_->total().Get("CPU")));
  return std::max<size_t>(cpus, 1) + blocked_ + actors_->num_alive() + actors_->num_pending();
}

size_t TaskManager::WorkerLimitFor(double num_cpus) const {
  // Tasks of a fraction of a CPU run as many at once as fit, as in Ray (four 0.5-CPU tasks at once on
  // 2 CPUs): the soft limit counts CPUs / fraction for them. (Starting workers count too, so a queue of
  // them never starts more than that.)
  size_t limit = SoftWorkerLimit();
  if (num_cpus > 0 && num_cpus < 1) {
    double cpus = std::ceil(ledger_->total().Get("CPU"));
    limit += static_cast<size_t>(std::ceil(cpus / num_cpus)) - static_cast<size_t>(cpus);
  }
  return limit;
}

void TaskManager::MakeRoomFor(const WorkerKind& kind) {
  // An idle worker of another kind (another environment) is stopped for it,
  // unless it created actors that live on (they would die with it).
  // (the owners are looked up only if an idle worker of another kind is there: at the limit with
  // every worker busy, as under a stream of tasks, this costs nothing)
  std::optional<std::unordered_set<std::string>> owners;
  pool_->StopIdleIf([&](const Worker& w) {
    if (w.kind == kind) return false;
    if (!owners) owners = actors_->Owners();
    return owners->count(w.client_id) == 0;
  });
}

bool TaskManager::IsShort(const std::string& function_id) const {
  auto it = exec_ewma_.find(function_id);
  return it != exec_ewma_.end() && it->second <= options_.short_task_seconds;
}

Worker* TaskManager::PipelineTarget(const Task& t) {
  // Only functions measured to be short are pipelined, and only behind tasks
  // measured short: a task queued behind one that blocks could wait for itself.
  if (!IsShort(t.spec.function_id())) return nullptr;
  size_t depth = options_.pipeline_depth;
  Worker* best = nullptr;
  const WorkerKind kind = WorkerKind::Of(t.spec);
  for (Worker* w : leased_) {
    if (w->dead || w->exiting || w->blocked || w->conn->closed() || !(w->leased == t.need) || w->inflight.size() >= depth ||
        w->long_inflight > 0 || w->kind != kind) {
      continue;
    }
    if (best == nullptr || w->inflight.size() < best->inflight.size()) best = w;
  }
  return best;
}

void TaskManager::Unpush(Worker* w, Task& t) {
  t.pushed = false;
  if (t.pushed_long) {
    --w->long_inflight;
    t.pushed_long = false;
  }
}

void TaskManager::Dispatch() {
  actors_->PlacePending();
  // The queues in ready_'s order: the deepest tasks first, then by resource shape (task_manager.h).
  for (auto shape = ready_.begin(); shape != ready_.end();) {
    std::deque<std::string>& q = shape->second;
    while (!q.empty()) {
      auto it = tasks_.find(q.front());
      if (it == tasks_.end()) {
        q.pop_front();
        --num_ready_;
        continue;
      }
      Task& t = it->second;
      if ((t.spec.strategy() != rpc::STRATEGY_DEFAULT || HasLabelSelector(t.spec)) && !t.spec.forwarded() &&
          !t.placed) {
        bool wait = false;
        if (PlaceByStrategy(q.front(), &wait)) {
          q.pop_front();
          --num_ready_;
          continue;
        }
        if (wait) break;  // (this shape's queue waits for its placement group)
      }
      Worker* w = nullptr;
      std::vector<int> gpus;
      // TryAcquire, not the summed totals: free GPU fractions can add up to
      // a whole GPU that no single device has.
      bool fits_now = ledger_->TryAcquire(t.need, &gpus);
      if (fits_now) {
        w = pool_->PopIdle(WorkerKind::Of(t.spec));
        if (w != nullptr) {
          w->leased = t.need;
          w->gpu_ids = std::move(gpus);
          w->has_lease = true;
          ++w->lease_seq;
          leased_.push_back(w);
        } else {
          ledger_->Release(t.need, gpus);
          WorkerKind kind = WorkerKind::Of(t.spec);
          if (pool_->num_starting(kind) < q.size()) {
            size_t limit = WorkerLimitFor(t.spec.num_cpus());
            if (pool_->size() >= limit) MakeRoomFor(kind);
            if (pool_->size() < limit) pool_->StartWorker(kind);
          }
        }
      }
      if (w == nullptr) w = PipelineTarget(t);
      if (w == nullptr && !fits_now && TrySpill(q.front())) {
        q.pop_front();
        --num_ready_;
        continue;
      }
      if (w == nullptr) break;
      std::string tid = q.front();
      q.pop_front();
      --num_ready_;
      Push(w, tid);
    }
    shape = q.empty() ? ready_.erase(shape) : std::next(shape);
  }
}

bool TaskManager::Feasible(const ResourceSet& need) const {
  return ledger_->total().Contains(need) || (remote_ != nullptr && remote_->FitsSomewhere(need));
}

bool TaskManager::BuildForwardSpec(const std::string& task_id, rpc::TaskSpec* out) {
  auto it = tasks_.find(task_id);
  return it != tasks_.end() && BuildForward(it->second, out);
}

void TaskManager::TraceArguments(const Task& t, uint64_t at_ns) {
  uint64_t words[2];  // (the task id, for the arrows from each argument's producer to this task)
  std::memcpy(words, t.spec.task_id().data(), sizeof(words));
  for (const auto& a : t.spec.args()) {
    if (!a.object_id().empty()) trace::Emit(trace::kArgument, at_ns, 0, a.object_id(), std::string(), words[0], words[1]);
  }
}

bool TaskManager::BuildForward(const Task& t, rpc::TaskSpec* out) {
  // A task sent here is not sent on (no spill loops); an actor's call is, to wherever its actor went from here
  // (an actor of no resources is placed where a CPU is free: its calls may reach its first node from a third).
  if (t.spec.forwarded() && t.spec.kind() != rpc::TASK_ACTOR_METHOD) return false;
  // (the node it goes to gets the arguments resolved: the arrows are noted here)
  if (t.queued_ns != 0) TraceArguments(t, trace::NowNs());
  *out = t.spec;
  out->set_forwarded(true);
  for (auto& a : *out->mutable_args()) {
    if (a.object_id().empty()) continue;
    if (!objects_->RemoteNode(a.object_id()).empty()) {
      continue;  // on a third node (held there for this one): the other node copies it from there
    }
    rpc::ObjectValue v;
    objects_->Describe(a.object_id(), &v, /*pin=*/false);
    if (v.state() == rpc::OBJ_IN_STORE) {
      continue;  // the other node copies it from here (ObjectTransfer); this task holds it meanwhile
    }
    if (v.state() != rpc::OBJ_INLINE) return false;  // lost: stays here (and fails)
    a.set_data(v.data());
    a.clear_object_id();
    // Refs inside the value travel with it (the other node borrows them; PeerManager).
    for (const auto& c : v.contained_ids()) out->add_contained_ids(c);
  }
  return true;
}

bool TaskManager::PlaceByStrategy(const std::string& task_id, bool* wait) {
  Task& t = tasks_[task_id];
  if (remote_ == nullptr) {
    t.placed = true;
    return false;
  }
  std::string node;
  if (PlacedByLabels(t.spec)) {
    LabelPlacement p = PlaceByLabels(*remote_, t.spec, t.need, options_.infeasible_timeout_ms, &t.labels_unmet_since);
    if (p.kind != LabelPlacement::kNode) {  // looked at again while a node with the labels may join, then it fails
      std::string msg = "task " + t.spec.function_name() + " cannot be placed: " + p.why;
      if (p.first_miss && events_ != nullptr) {
        events_->Warn(t.spec.caller_id(), msg + "; it waits " + std::to_string(options_.infeasible_timeout_ms / 1000) +
                                              " s for such a node, then fails");
      }
      if (p.kind == LabelPlacement::kFail) {
        t.placed = true;
        FailTask(task_id, StatusCode::kInfeasible, msg);
        return true;
      }
      After(LabelPlacement::kRetryMs, [this, task_id] {
        if (tasks_.count(task_id)) BecomeReady(task_id);
      });
      return true;  // (out of the ready queue until then)
    }
    node = p.node;
  }
  switch (node.empty() ? t.spec.strategy() : rpc::STRATEGY_DEFAULT) {
    case rpc::STRATEGY_SPREAD:
      node = remote_->NextSpreadNode();
      break;
    case rpc::STRATEGY_NODE_AFFINITY:
      node = t.spec.affinity_node();
      break;
    case rpc::STRATEGY_PLACEMENT_GROUP: {
      if (groups_ == nullptr) break;
      BundleWhere where = groups_->Locate(t.spec.placement_group_id(), t.spec.bundle_index(), PlainNeed(t.spec));
      if (where.kind == BundleWhere::kWait) {
        *wait = true;
        return false;
      }
      if (where.kind == BundleWhere::kGone) {
        t.placed = true;
        FailTask(task_id, StatusCode::kInfeasible, "task " + t.spec.function_name() + " cannot be placed: " + where.why);
        return true;
      }
      node = where.node;
      break;
    }
    default:
      break;
  }
  t.placed = true;  // decided once; runs here from now on if it stays
  if (node.empty() || node == node_id_) return false;
  rpc::TaskSpec forward;
  if (!BuildForward(t, &forward)) return false;  // cannot leave: runs here
  if (remote_->SpillTo(node, forward)) {
    t.spilled_to = node;
  } else {
    if (t.spec.strategy() == rpc::STRATEGY_NODE_AFFINITY && !t.spec.affinity_soft()) {
      // A node that has just joined reaches this node's view at its first
      // heartbeat here: look again for a while before failing.
      if (StillLooking(&t.affinity_missed_since, kAffinityLookMs)) {
        t.placed = false;
        After(kAffinityRetryMs, [this, task_id] {
          if (tasks_.count(task_id)) BecomeReady(task_id);
        });
        return true;  // (out of the ready queue until then)
      }
      FailTask(task_id, StatusCode::kInfeasible,
               "task " + t.spec.function_name() + " must run on node " + ToHex(node).substr(0, 12) +
                   " (hard node affinity), which is not alive");
      return true;
    }
    return false;
  }
  --stats_.queued;
  ++stats_.running;
  ++stats_.spilled;
  return true;
}

bool TaskManager::TrySpill(const std::string& task_id) {
  if (remote_ == nullptr) return false;
  Task& t = tasks_[task_id];
  rpc::TaskSpec forward;
  if (!BuildForward(t, &forward)) return false;
  t.spilled_to = remote_->Spill(forward, t.need);
  if (t.spilled_to.empty()) return false;
  --stats_.queued;
  ++stats_.running;
  ++stats_.spilled;
  return true;
}

void TaskManager::OnForwardedDone(const std::string& task_id, rpc::ForwardTaskReply reply) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  // A spilled task counted as running; an actor's call or creation sent to
  // its host node was still counted as queued here.
  if (it->second.spilled_to.empty()) {
    --stats_.queued;
  } else {
    --stats_.running;
  }
  for (auto& r : *reply.mutable_returns()) {
    std::vector<std::string> contained(r.contained_ids().begin(), r.contained_ids().end());
    if (r.data().size() > options_.inline_threshold) {
      Status st = objects_->PutInStore(r.object_id(), r.data(), contained);
      if (!st.ok()) objects_->MarkLost(r.object_id(), st.code(), "result of " + it->second.spec.function_name() +
                                                                    " could not be stored here: " + st.message());
    } else {
      objects_->PutInline(r.object_id(), std::move(*r.mutable_data()), std::move(contained));
    }
  }
  for (const auto& l : reply.lost()) {
    if (l.object_id().size() != kObjectIdSize || TaskIdOf(l.object_id()) != task_id) continue;  // not this task's
    objects_->MarkLost(l.object_id(), static_cast<StatusCode>(l.error_code()), l.error());
  }
  rpc::TaskSpec spec = it->second.spec;
  if (spec.kind() != rpc::TASK_ACTOR_CREATION) Finish(task_id, reply.error().empty(), reply.error());
  if (spec.kind() != rpc::TASK_NORMAL) actors_->OnRemoteDone(spec);
  Dispatch();
}

void TaskManager::OnForwardFailed(const std::string& task_id, const std::string& why, bool reached) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  Task& t = it->second;
  if (!t.spilled_to.empty()) {  // back in the queue here
    --stats_.running;
    ++stats_.queued;
    t.spilled_to.clear();
  }
  if (t.spec.kind() != rpc::TASK_NORMAL) {  // the actor's host went away
    rpc::TaskSpec spec = t.spec;
    actors_->OnRemoteFailed(spec, why);
    Dispatch();
    return;
  }
  if (!reached && t.unreached < kFreeReplacements) {  // it never ran: no retry spent
    ++t.unreached;
    t.placed = t.spec.strategy() == rpc::STRATEGY_NODE_AFFINITY;
    PHALANX_LOG(Warning) << "placing " << t.spec.function_name() << " again: " << why;
    BecomeReady(task_id);
    return;
  }
  if (t.spec.attempt() >= t.spec.max_retries()) {
    FailTask(task_id, StatusCode::kWorkerDied,
             "task " + t.spec.function_name() + " failed: " + why + " while running it" +
                 (t.spec.max_retries() > 0 ? " (after " + std::to_string(t.spec.max_retries()) + " retries)" : ""));
    return;
  }
  t.spec.set_attempt(t.spec.attempt() + 1);
  ++stats_.retried;
  t.placed = t.spec.strategy() == rpc::STRATEGY_NODE_AFFINITY;  // that node is gone: no second try there
  PHALANX_LOG(Warning) << "retrying " << t.spec.function_name() << ": " << why;
  BecomeReady(task_id);
}

void TaskManager::Cancel(const rpc::CancelTask& m) {
  const std::string& tid = m.task_id();
  if (m.recursive()) {
    std::vector<std::string> children;
    for (const auto& [id, c] : tasks_) {
      if (c.spec.parent_task_id() == tid) children.push_back(id);
    }
    for (const auto& child : children) {
      rpc::CancelTask c = m;
      c.set_task_id(child);
      Cancel(c);
    }
  }
  auto it = tasks_.find(tid);
  if (it == tasks_.end()) return;
  Task& t = it->second;
  if (t.spec.kind() == rpc::TASK_ACTOR_CREATION) return;  // (an actor is stopped with kill)
  // Sent to another node (spilled, or a call to an actor hosted there): cancelled there.
  std::string away = t.spilled_to;
  if (away.empty() && t.spec.kind() == rpc::TASK_ACTOR_METHOD) away = actors_->ForwardedTo(t.spec.actor_id(), tid);
  if (!away.empty()) {
    if (remote_ != nullptr) remote_->CancelTask(away, m);
    return;
  }
  Worker* w = nullptr;
  for (Worker* x : pool_->All()) {
    if (std::find(x->inflight.begin(), x->inflight.end(), tid) != x->inflight.end()) w = x;
  }
  if (w == nullptr) {
    // Not pushed to a worker yet. A method call waits in its actor's queue
    // (the actor manager pushes what is still a task when its turn comes).
    t.cancelled = true;
    std::string actor = t.spec.kind() == rpc::TASK_ACTOR_METHOD ? t.spec.actor_id() : std::string();
    FailTask(tid, StatusCode::kCancelled, "task " + t.spec.function_name() + " was cancelled before it ran");
    if (!actor.empty()) actors_->OnCallCancelled(actor);  // the caller's later calls may go now
    Dispatch();
    return;
  }
  t.cancelled = true;
  if (m.force() && w->actor_id.empty() && w->inflight.front() == tid && w->pid > 0) {
    ::kill(w->pid, SIGKILL);  // OnWorkerDied fails it (cancelled: never retried)
    return;
  }
  w->conn->Send(rpc::CANCEL_TASK, 0, 0, m);
  // The worker's thread may be busy with another task (or this one) and not
  // reading: the signal has it read the notice now, and a task (not an actor's
  // call) that runs it gets KeyboardInterrupt.
  if (w->pid > 0) ::kill(w->pid, SIGUSR2);
}

void TaskManager::After(int64_t ms, std::function<void()> fn) {
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(ms));
  timer->async_wait([timer, fn = std::move(fn)](const boost::system::error_code& ec) {
    if (!ec) fn();
  });
}

void TaskManager::WatchInfeasible(const std::string& tid) {
  Task& t = tasks_[tid];
  std::string msg = "task " + t.spec.function_name() + " asks for " + t.need.ToString() +
                    " but no node has that much (this node: " + ledger_->total().ToString() + ")";
  if (events_ != nullptr) {
    events_->Warn(t.spec.caller_id(), msg + "; it waits " + std::to_string(options_.infeasible_timeout_ms / 1000) +
                                          " s for such a node, then fails");
  }
  PHALANX_LOG(Warning) << msg;
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(options_.infeasible_timeout_ms));
  timer->async_wait([this, timer, tid, msg](const boost::system::error_code& ec) {
    if (ec || !tasks_.count(tid)) return;
    Task& t = tasks_[tid];
    if (Feasible(t.need)) return;  // a node that can hold it joined
    if (t.spec.kind() == rpc::TASK_ACTOR_CREATION) {
      actors_->FailInfeasible(t.spec.actor_id(), msg);
    } else {
      FailTask(tid, StatusCode::kInfeasible, msg);
    }
  });
}

bool TaskManager::Push(Worker* w, const std::string& task_id) {
  Task& t = tasks_[task_id];
  // An argument may have gone to disk again since the task became ready (a
  // restore makes room by spilling): the task waits for it to come back,
  // rather than have its read-back fail now for want of room.
  int spilled = 0;
  for (const auto& a : t.spec.args()) {
    if (!a.object_id().empty() && objects_->IsSpilled(a.object_id())) ++spilled;
  }
  if (spilled > 0) {
    ReleaseLeaseIfIdle(w);
    t.deps_left = spilled;
    for (const auto& a : t.spec.args()) {
      if (a.object_id().empty() || !objects_->IsSpilled(a.object_id())) continue;
      objects_->OnResident(a.object_id(), [this, task_id] {
        auto it = tasks_.find(task_id);
        if (it != tasks_.end() && --it->second.deps_left == 0) BecomeReady(task_id);
      });
    }
    return false;
  }
  rpc::PushTask msg;
  for (const auto& a : t.spec.args()) {
    if (a.object_id().empty()) continue;
    rpc::ObjectValue* v = msg.add_ref_args();
    objects_->Describe(a.object_id(), v, /*pin=*/true);
    if (v->state() == rpc::OBJ_IN_STORE) {
      ++w->pins[a.object_id()];  // released by the worker's views
      t.pushed_pins.push_back(a.object_id());
    }
    if (v->state() == rpc::OBJ_LOST) {
      std::string why = "an argument of " + t.spec.function_name() + " is unavailable: " + v->error();
      auto code = static_cast<StatusCode>(v->error_code());
      ReleaseLeaseIfIdle(w);
      FailTask(task_id, code, why);
      return false;
    }
  }
  *msg.mutable_spec() = t.spec;
  if (t.queued_ns != 0) {
    t.dispatched_ns = trace::NowNs();
    t.worker_pid = w->pid;
    TraceArguments(t, t.dispatched_ns);
  }
  for (int g : w->gpu_ids) msg.add_gpu_ids(g);
  w->inflight.push_back(task_id);
  t.pushed = true;
  t.pushed_long = !IsShort(t.spec.function_id());
  if (t.pushed_long) ++w->long_inflight;
  ++stats_.running;
  --stats_.queued;
  w->conn->Send(rpc::PUSH_TASK, 0, 0, msg);
  return true;
}

void TaskManager::ReleaseArgs(Task& t) {
  for (const auto& a : t.spec.args()) {
    if (!a.object_id().empty()) objects_->RemoveRef(a.object_id());
  }
  for (const auto& c : t.spec.contained_ids()) objects_->RemoveRef(c);
}

void TaskManager::ReleaseLeaseIfIdle(Worker* w) {
  if (!w->inflight.empty() || !w->has_lease || w->exiting) return;
  ledger_->Release(w->leased, w->gpu_ids, /*lent=*/w->blocked);
  if (w->blocked) {  // its task ended inside a get (cancelled: KeyboardInterrupt); that get no longer blocks anything
    w->blocked = false;
    --blocked_;
  }
  w->gpu_ids.clear();
  w->has_lease = false;
  w->leased = ResourceSet();
  leased_.erase(std::remove(leased_.begin(), leased_.end(), w), leased_.end());
  pool_->PushIdle(w);
}

void TaskManager::OnTaskDone(Worker* w, rpc::TaskDone done) {
  const std::string& tid = done.task_id();
  auto pos = std::find(w->inflight.begin(), w->inflight.end(), tid);
  if (pos == w->inflight.end()) {
    PHALANX_LOG(Warning) << "worker " << w->pid << " finished task " << ToHex(tid) << " it was not running";
    return;
  }
  w->inflight.erase(pos);
  --stats_.running;
  // Its process is on its way out (the task called sys.exit): nothing more
  // goes to it, and what is queued behind this task goes back to the queue
  // when it is gone (OnWorkerDied).
  if (done.exiting()) w->exiting = true;
  auto it = tasks_.find(tid);
  if (it != tasks_.end()) {
    Unpush(w, it->second);
    double& avg = exec_ewma_[it->second.spec.function_id()];
    avg = avg == 0 ? done.exec_seconds() : 0.8 * avg + 0.2 * done.exec_seconds();
    for (auto& r : *done.mutable_returns()) {
      if (r.in_store()) continue;  // the worker created and sealed it already
      std::vector<std::string> contained(r.contained_ids().begin(), r.contained_ids().end());
      objects_->PutInline(r.object_id(), std::move(*r.mutable_data()), std::move(contained));
    }
    if (!w->actor_id.empty()) {
      rpc::TaskSpec spec = it->second.spec;
      actors_->OnTaskDone(w, spec, done);
      return;
    }
    Finish(tid, done.error().empty(), done.error());
  }
  ReleaseLeaseIfIdle(w);
  Dispatch();
}

uint16_t TaskManager::TraceFlags(const Task& t, uint16_t flags) {
  return static_cast<uint16_t>(flags | (t.spec.kind() == rpc::TASK_ACTOR_METHOD ? trace::kActorCall : 0));
}

void TaskManager::TraceInFlight(std::string* out, size_t max) const {
  uint64_t now = trace::NowNs();
  size_t n = 0;
  for (const auto& [task_id, t] : tasks_) {
    if (t.queued_ns == 0) continue;  // (queued while tracing was off)
    if (n++ >= max) break;
    trace::AppendRecord(out, trace::kTask, t.queued_ns, now - std::min(now, t.queued_ns), task_id,
                        t.spec.function_name(), t.dispatched_ns, static_cast<uint64_t>(t.worker_pid), t.spilled_to,
                        TraceFlags(t, trace::kInFlight));
  }
}

void TaskManager::Finish(const std::string& task_id, bool ok, const std::string& error) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  Task t = std::move(it->second);
  tasks_.erase(it);
  t.pushed_pins.clear();  // the worker's views own those pins now
  ok ? ++stats_.finished : ++stats_.failed;
  Record(t, ok ? rpc::TASK_FINISHED : rpc::TASK_FAILED, error);
  if (t.queued_ns != 0) {
    uint64_t now = trace::NowNs();
    trace::Emit(trace::kTask, t.queued_ns, now - t.queued_ns, task_id, t.spec.function_name(), t.dispatched_ns,
                static_cast<uint64_t>(t.worker_pid), t.spilled_to, TraceFlags(t, ok ? 0 : trace::kFailed));
  }
  // Lineage only for what can be lost with another node: results of a task
  // that ran there and are still only there (being copied here). A task that
  // ran here, or whose results all came back in the reply, needs none (and
  // costs nothing: the microbenchmark's tasks take this path).
  std::vector<uint32_t> exposed;  // (results nobody held were freed as they came: no lineage for them)
  if (ok && !t.spilled_to.empty()) {
    for (int i = 1; i <= t.spec.num_returns(); ++i) {
      std::string id = MakeObjectId(task_id, static_cast<uint32_t>(i));
      if (!objects_->RemoteNode(id).empty()) exposed.push_back(static_cast<uint32_t>(i));
    }
  }
  if (exposed.empty()) return ReleaseArgs(t);
  // The task's references to its arguments go to the lineage with its spec:
  // a rerun finds them (or has them made again in turn) until the results
  // are copied here or freed.
  std::vector<std::string> held;
  for (const auto& a : t.spec.args()) {
    if (!a.object_id().empty()) held.push_back(a.object_id());
  }
  held.insert(held.end(), t.spec.contained_ids().begin(), t.spec.contained_ids().end());
  lineage_.Record(std::move(t.spec), std::move(exposed), std::move(held));
}

void TaskManager::OnReturnSafe(const std::string& object_id) {
  if (lineage_.size() > 0 && object_id.size() == kObjectIdSize && IndexOf(object_id) > 0) {
    lineage_.ReturnSafe(TaskIdOf(object_id), IndexOf(object_id));
  }
}

bool TaskManager::Rebuild(const std::string& object_id, std::string* why) {
  if (object_id.size() != kObjectIdSize || IndexOf(object_id) == 0) {
    *why = "it was made by put(): there is no task to run again";
    return false;
  }
  std::string tid = TaskIdOf(object_id);
  if (tasks_.count(tid)) return true;  // (running again already, for another of its results)
  auto rerun = lineage_.TakeForRerun(tid, why);
  if (!rerun) return false;
  rpc::TaskSpec& spec = rerun->spec;
  // Its arguments are still here (the lineage held them), or on their way
  // again; one that is not was freed before the lineage took it.
  for (const auto& a : spec.args()) {
    if (a.object_id().empty() || objects_->Contains(a.object_id())) continue;
    *why = "its task " + spec.function_name() + " cannot run again: its argument " + ToHex(a.object_id()) +
           " was freed (nothing held it any more)";
    ReleaseHeld(std::move(rerun->held));
    return false;
  }
  spec.set_attempt(spec.attempt() + 1);
  ++stats_.retried;
  ++stats_.reconstructed;
  PHALANX_LOG(Warning) << "running " << spec.function_name() << " again (retry " << spec.attempt() << " of "
                       << spec.max_retries() << ") to rebuild object " << ToHex(object_id)
                       << ": every copy of it is gone";
  Submit(std::move(spec));  // (takes its own references to the arguments)
  ReleaseHeld(std::move(rerun->held));
  return tasks_.count(tid) > 0;
}

void TaskManager::ForEachArgument(
    const std::function<void(const std::string&, const std::string&, bool, bool)>& fn) const {
  for (const auto& [tid, t] : tasks_) {
    bool running = t.pushed;
    for (const auto& a : t.spec.args()) {
      if (!a.object_id().empty()) fn(a.object_id(), t.spec.function_name(), running, false);
    }
    for (const auto& c : t.spec.contained_ids()) fn(c, t.spec.function_name(), running, false);
  }
  lineage_.ForEachHeld([&fn](const std::string& id, const std::string& name) { fn(id, name, false, true); });
}

void TaskManager::ReleaseHeld(std::vector<std::string> held) {
  for (const auto& id : held) objects_->RemoveRef(id);
}

void TaskManager::FailTask(const std::string& task_id, StatusCode code, const std::string& why) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return;
  --stats_.queued;
  for (int i = 1; i <= it->second.spec.num_returns(); ++i) {
    objects_->MarkLost(MakeObjectId(task_id, static_cast<uint32_t>(i)), code, why);
  }
  Finish(task_id, false, why);
}

void TaskManager::FailGroup(const std::string& pg_id, const std::string& why) {
  std::vector<std::string> waiting;
  std::unordered_set<Worker*> running;
  for (const auto& [id, t] : tasks_) {
    if (t.spec.placement_group_id() != pg_id || t.spec.kind() != rpc::TASK_NORMAL || !t.spilled_to.empty()) continue;
    Worker* runs = nullptr;
    for (Worker* w : pool_->All()) {
      if (std::find(w->inflight.begin(), w->inflight.end(), id) != w->inflight.end()) runs = w;
    }
    if (runs == nullptr) {
      waiting.push_back(id);
    } else {
      running.insert(runs);
    }
  }
  for (const auto& id : waiting) {
    FailTask(id, StatusCode::kInfeasible, "task " + tasks_[id].spec.function_name() + " cannot run: " + why);
  }
  // As Ray's: the workers running its tasks are killed (their tasks fail as crashed, or are retried and
  // then find the group gone), and the group's resources are free at once.
  for (Worker* w : running) {
    PHALANX_LOG(Info) << "killing worker " << w->pid << ": " << why;
    if (w->pid > 0) ::kill(w->pid, SIGKILL);
  }
}

void TaskManager::Record(const Task& t, rpc::TaskState state, const std::string& error) {
  if (events_ == nullptr) return;
  rpc::TaskRecord r;
  r.set_task_id(t.spec.task_id());
  r.set_function_name(t.spec.function_name());
  r.set_state(state);
  r.set_attempt(t.spec.attempt());
  r.set_num_returns(t.spec.num_returns());
  if (!error.empty()) r.set_error(error.substr(0, 4096));
  events_->OnTaskRecord(r);
}

TaskManagerStats TaskManager::Stats() const { return stats_; }

}  // namespace phalanx::scheduler
