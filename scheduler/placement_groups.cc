#include "scheduler/placement_groups.h"

#include <chrono>

#include "core/ids.h"
#include "core/logging.h"

namespace phalanx::scheduler {

namespace {
uint64_t WallUs() {  // (the group's times, as the state API shows them)
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace

namespace {
ResourceSet BundleResources(const rpc::Bundle& b) {
  return ResourceSet(std::map<std::string, double>(b.resources().begin(), b.resources().end()));
}

// How many bundles a group may have, and how many resources a bundle may name.
constexpr int kMaxBundles = 10000;
constexpr int kMaxResourcesPerBundle = 64;
}  // namespace

const char* StrategyName(rpc::PlacementStrategy s) {
  switch (s) {
    case rpc::PACK:
      return "PACK";
    case rpc::SPREAD:
      return "SPREAD";
    case rpc::STRICT_PACK:
      return "STRICT_PACK";
    case rpc::STRICT_SPREAD:
      return "STRICT_SPREAD";
    default:
      return "?";
  }
}

std::string PlacementGroups::Describe(const rpc::PlacementGroupInfo& info) const {
  std::string s = "placement group " + (info.name().empty() ? ToHex(info.pg_id()).substr(0, 12) : "'" + info.name() + "'");
  s += " (" + std::string(StrategyName(info.strategy())) + ", bundles [";
  for (int i = 0; i < info.bundles_size(); ++i) s += (i ? ", " : "") + BundleResources(info.bundles(i)).ToString();
  return s + "])";
}

Status PlacementGroups::Create(rpc::PlacementGroupInfo info) {
  if (info.pg_id().size() != kTaskIdSize) return Status::InvalidArgument("a placement group id has the wrong size");
  if (groups_.count(info.pg_id())) return Status::AlreadyExists("placement group " + ToHex(info.pg_id()) + " exists");
  if (info.bundles_size() == 0) return Status::InvalidArgument("a placement group needs at least one bundle");
  if (info.bundles_size() > kMaxBundles) {
    return Status::InvalidArgument("a placement group has at most " + std::to_string(kMaxBundles) + " bundles");
  }
  if (!rpc::PlacementStrategy_IsValid(info.strategy())) return Status::InvalidArgument("unknown placement strategy");
  for (int i = 0; i < info.bundles_size(); ++i) {
    auto* b = info.mutable_bundles(i);
    b->clear_node_id();
    if (b->resources_size() > kMaxResourcesPerBundle) {
      return Status::InvalidArgument("bundle " + std::to_string(i) + " names more than " +
                                     std::to_string(kMaxResourcesPerBundle) + " resources");
    }
    bool any = false;
    for (const auto& [k, v] : b->resources()) {
      if (!(v >= 0) || v > 1e12) return Status::InvalidArgument("bundle " + std::to_string(i) + " asks for " + k + " = " + std::to_string(v));
      if (k.empty() || k.find("_group_") != std::string::npos) {
        return Status::InvalidArgument("bundle " + std::to_string(i) + " names a resource '" + k +
                                       "' (names with _group_ are the groups' own)");
      }
      any = any || v > 0;
    }
    if (!any) {
      return Status::InvalidArgument("bundle " + std::to_string(i) + " of the placement group reserves no resources: "
                                     "give each bundle at least one positive amount, e.g. {\"CPU\": 1}");
    }
  }
  info.set_state(rpc::PG_PENDING);
  info.set_coordinator_node(self_);
  info.set_requested_us(WallUs());
  std::string id = info.pg_id();
  groups_[id].info = std::move(info);
  Publish(groups_[id]);
  Schedule(id);
  return Status::OK();
}

const rpc::PlacementGroupInfo* PlacementGroups::Find(const std::string& pg_id) const {
  auto it = groups_.find(pg_id);
  return it == groups_.end() ? nullptr : &it->second.info;
}

void PlacementGroups::Publish(const Group& g) {
  host_->Publish(g.info);
}

void PlacementGroups::Send(const std::string& node, rpc::MessageType type, const rpc::BundleOp& op,
                           std::function<void(const Status&)> done) {
  if (node == self_) {
    Status st = OnBundleOp(type, op);
    if (done) done(st);
    return;
  }
  host_->SendBundleOp(node, type, op, std::move(done));
}

bool PlacementGroups::Plan(const Group& g, std::map<int, std::string>* plan, std::string* why) const {
  struct Cand {
    std::string id;
    ResourceSet free;
    int used = 0;  // bundles of this group on it
  };
  std::vector<Cand> cands;
  cands.push_back({self_, ledger_->available(), 0});
  for (auto& [id, free] : host_->Others()) cands.push_back({id, free, 0});
  auto find = [&](const std::string& id) -> Cand* {
    for (auto& c : cands) {
      if (c.id == id) return &c;
    }
    return nullptr;
  };
  std::vector<int> todo;
  for (int i = 0; i < g.info.bundles_size(); ++i) {
    const std::string& at = g.info.bundles(i).node_id();
    if (at.empty()) {
      todo.push_back(i);
    } else if (Cand* c = find(at)) {
      ++c->used;
    }
  }
  rpc::PlacementStrategy s = g.info.strategy();
  auto fits_all_on = [&](Cand& c) {
    ResourceSet sum;
    for (int i : todo) sum.Add(BundleResources(g.info.bundles(i)));
    return c.free.Contains(sum);
  };
  if (s == rpc::STRICT_PACK || s == rpc::PACK) {
    // One node for all (the one already holding some, else the first with room).
    Cand* one = nullptr;
    for (auto& c : cands) {
      if (c.used > 0) one = &c;
    }
    if (one == nullptr || !fits_all_on(*one)) {
      one = nullptr;
      bool placed_before = false;
      for (auto& c : cands) placed_before = placed_before || c.used > 0;
      if (!(s == rpc::STRICT_PACK && placed_before)) {
        for (auto& c : cands) {
          if (fits_all_on(c)) {
            one = &c;
            break;
          }
        }
      }
    }
    if (one != nullptr) {
      for (int i : todo) (*plan)[i] = one->id;
      return true;
    }
    if (s == rpc::STRICT_PACK) {
      *why = "STRICT_PACK: no node has room for all its bundles together";
      return false;
    }
  }
  for (int i : todo) {
    ResourceSet need = BundleResources(g.info.bundles(i));
    Cand* best = nullptr;
    for (auto& c : cands) {
      if (!c.free.Contains(need)) continue;
      if (s == rpc::STRICT_SPREAD && c.used > 0) continue;
      if (best == nullptr) {
        best = &c;
      } else if (s == rpc::PACK ? c.used > best->used : c.used < best->used) {
        best = &c;  // PACK: where the group already is; SPREAD: where it is least
      }
    }
    if (best == nullptr) {
      std::string free;
      for (const auto& c : cands) {
        ResourceSet plain;  // (groups' own names left out)
        for (const auto& [k, v] : c.free.amounts()) {
          if (k.find("_group_") == std::string::npos) plain.Set(k, v);
        }
        free += (free.empty() ? "" : ", ") +
                (c.id == self_ ? std::string("this node") : "node " + ToHex(c.id).substr(0, 12)) + " " +
                plain.ToString();
      }
      *why = "bundle " + std::to_string(i) + " " + need.ToString() +
             (s == rpc::STRICT_SPREAD ? " has no node of its own with room (STRICT_SPREAD: one node per bundle)"
                                      : " fits on no node") +
             "; free now: " + free;
      return false;
    }
    best->free.Subtract(need);
    ++best->used;
    (*plan)[i] = best->id;
  }
  return true;
}

void PlacementGroups::RetryLater(const std::string& pg_id) {
  auto it = groups_.find(pg_id);
  if (it == groups_.end() || it->second.retry_queued) return;
  it->second.retry_queued = true;
  host_->After(kRetry, [this, pg_id] {
    auto g = groups_.find(pg_id);
    if (g == groups_.end()) return;
    g->second.retry_queued = false;
    Schedule(pg_id);
  });
}

void PlacementGroups::Schedule(const std::string& pg_id) {
  auto it = groups_.find(pg_id);
  if (it == groups_.end()) return;
  Group& g = it->second;
  if (g.in_flight || g.info.state() == rpc::PG_REMOVED || g.info.state() == rpc::PG_CREATED) return;
  std::map<int, std::string> plan;
  std::string why;
  if (!Plan(g, &plan, &why)) {
    if (g.info.why_pending() != why) {
      g.info.set_why_pending(why);
      Publish(g);
    }
    RetryLater(pg_id);
    return;
  }
  g.in_flight = true;
  uint64_t attempt = ++g.attempt;
  g.info.set_scheduling_attempts(g.info.scheduling_attempts() + 1);
  auto answers = std::make_shared<std::map<int, Status>>();
  size_t want = plan.size();
  for (const auto& [index, node] : plan) {
    rpc::BundleOp op;
    op.set_pg_id(pg_id);
    op.set_index(index);
    *op.mutable_resources() = g.info.bundles(index).resources();
    int i = index;
    Send(node, rpc::BUNDLE_PREPARE, op, [this, pg_id, attempt, plan, answers, want, i](const Status& st) {
      (*answers)[i] = st;
      if (answers->size() == want) Prepared(pg_id, attempt, plan, *answers);
    });
  }
}

void PlacementGroups::Prepared(const std::string& pg_id, uint64_t attempt, std::map<int, std::string> plan,
                               std::map<int, Status> answers) {
  auto it = groups_.find(pg_id);
  bool current = it != groups_.end() && it->second.attempt == attempt && it->second.info.state() != rpc::PG_REMOVED;
  bool all_ok = current;
  std::string refused;
  for (const auto& [i, st] : answers) {
    if (!st.ok()) {
      all_ok = false;
      if (refused.empty()) refused = "node " + ToHex(plan[i]).substr(0, 12) + ": " + st.message();
    }
  }
  if (!all_ok) {
    // Give back what was set aside; try again a little later.
    for (const auto& [i, st] : answers) {
      if (!st.ok()) continue;
      rpc::BundleOp op;
      op.set_pg_id(pg_id);
      op.set_index(i);
      Send(plan[i], rpc::BUNDLE_RETURN, op, nullptr);
    }
    if (!current) return;
    Group& g = it->second;
    g.in_flight = false;
    g.info.set_why_pending("a node refused its bundle (" + refused + ")");
    Publish(g);
    RetryLater(pg_id);
    return;
  }
  Group& g = it->second;
  for (const auto& [index, node] : plan) {
    int i = index;  // (a structured binding cannot be captured in C++17)
    rpc::BundleOp op;
    op.set_pg_id(pg_id);
    op.set_index(i);
    g.info.mutable_bundles(i)->set_node_id(node);
    Send(node, rpc::BUNDLE_COMMIT, op, [this, pg_id, i](const Status& st) {
      if (st.ok()) return;
      // The node went away between the phases: that bundle is placed again.
      PHALANX_LOG(Warning) << "placement group " << ToHex(pg_id).substr(0, 12) << ": bundle " << i
                           << " was not committed: " << st.message();
      auto g = groups_.find(pg_id);
      if (g == groups_.end() || g->second.info.state() == rpc::PG_REMOVED) return;
      g->second.info.mutable_bundles(i)->clear_node_id();
      g->second.info.set_state(rpc::PG_RESCHEDULING);
      Publish(g->second);
      Schedule(pg_id);
    });
  }
  g.in_flight = false;
  bool placed = true;
  for (const auto& b : g.info.bundles()) placed = placed && !b.node_id().empty();
  if (!placed) {  // (a commit failed at once)
    Schedule(pg_id);
    return;
  }
  g.info.set_state(rpc::PG_CREATED);
  g.info.clear_why_pending();
  g.info.set_created_us(WallUs());
  Publish(g);
  host_->Created(g.info);
  host_->Changed();
}

Status PlacementGroups::Remove(const std::string& pg_id) {
  auto it = groups_.find(pg_id);
  if (it == groups_.end()) return Status::NotFound("placement group " + ToHex(pg_id) + " is not coordinated here");
  Group& g = it->second;
  if (g.info.state() == rpc::PG_REMOVED) return Status::OK();
  bool was_created = g.info.state() == rpc::PG_CREATED;
  g.info.set_state(rpc::PG_REMOVED);
  ++g.attempt;  // (answers to a reservation under way give their bundles back)
  std::set<std::string> nodes;
  for (const auto& b : g.info.bundles()) {
    if (!b.node_id().empty()) nodes.insert(b.node_id());
  }
  for (const auto& node : nodes) {
    rpc::BundleOp op;
    op.set_pg_id(pg_id);
    op.set_index(-1);  // the whole group there
    Send(node, rpc::BUNDLE_RETURN, op, nullptr);
  }
  Publish(g);
  host_->Removed(g.info, was_created ? "it was removed" : "it was removed before it was placed");
  host_->Changed();
  // The record stays (state REMOVED) for lookups, the newest kKeepRemoved of
  // them; the entry here is dropped, so that create+remove in a loop keeps nothing.
  groups_.erase(it);
  removed_.push_back(pg_id);
  if (removed_.size() > kKeepRemoved) {
    host_->Forget(removed_.front());
    removed_.pop_front();
  }
  return Status::OK();
}

PlacementGroups::Where PlacementGroups::Locate(const std::string& pg_id, int index, const ResourceSet& need) {
  const rpc::PlacementGroupInfo* info = Find(pg_id);
  if (info == nullptr) {
    auto k = known_.find(pg_id);
    if (k != known_.end()) info = &k->second;
  }
  Where w;
  if (ledger_->Removed(pg_id) || (info != nullptr && info->state() == rpc::PG_REMOVED)) {
    w.kind = Where::kGone;
    w.why = "its placement group was removed (" + ToHex(pg_id).substr(0, 12) + ")";
    return w;
  }
  if (info != nullptr && index >= info->bundles_size()) {
    w.kind = Where::kGone;
    w.why = "bundle index " + std::to_string(index) + " is out of range: the placement group has " +
            std::to_string(info->bundles_size()) + " bundles";
    return w;
  }
  if (info != nullptr) {
    bool fits = false;
    for (int i = 0; i < info->bundles_size(); ++i) {
      if ((index < 0 || i == index) && BundleResources(info->bundles(i)).Contains(need)) fits = true;
    }
    if (!fits) {
      w.kind = Where::kGone;
      w.why = "it asks for " + need.ToString() + ", more than " +
              (index < 0 ? std::string("any bundle") : "bundle " + std::to_string(index)) + " of " + Describe(*info) +
              " holds";
      return w;
    }
  }
  if (info != nullptr && info->state() == rpc::PG_CREATED) {
    w.kind = Where::kNode;
    if (index >= 0) {
      w.node = info->bundles(index).node_id();
    } else {
      w.node = info->bundles(0).node_id();
      for (const auto& b : info->bundles()) {
        if (b.node_id() == self_) w.node = self_;  // any bundle: one here if there is
      }
    }
    return w;
  }
  if (Find(pg_id) != nullptr) return w;  // placed here when it can be: `changed` runs then
  // Another node's group: look it up (again, while it is pending).
  if (!looking_up_.count(pg_id)) {
    looking_up_.insert(pg_id);
    host_->Fetch(pg_id, [this, pg_id](Result<rpc::PlacementGroupInfo> r) {
      looking_up_.erase(pg_id);
      bool ready = false;
      if (r.ok()) {
        ready = r.value().state() == rpc::PG_CREATED || r.value().state() == rpc::PG_REMOVED;
        known_[pg_id] = std::move(r.value());
      }
      if (ready) {
        host_->Changed();
      } else {
        host_->After(kRetry, [this] {
          host_->Changed();  // (asks again)
        });
      }
    });
  }
  return w;
}

void PlacementGroups::OnClientGone(const std::string& client_id) {
  std::vector<std::string> gone;
  for (const auto& [id, g] : groups_) {
    if (g.info.creator_id() == client_id && !g.info.detached()) gone.push_back(id);
  }
  for (const auto& id : gone) (void)Remove(id);
}

void PlacementGroups::OnNodeDead(const std::string& node_id) {
  for (auto& [id, g] : groups_) {
    if (g.info.state() == rpc::PG_REMOVED) continue;
    bool lost = false;
    for (auto& b : *g.info.mutable_bundles()) {
      if (b.node_id() == node_id) {
        b.clear_node_id();
        lost = true;
      }
    }
    if (!lost) continue;
    PHALANX_LOG(Warning) << Describe(g.info) << " lost bundles on dead node " << ToHex(node_id).substr(0, 12)
                         << ": placing them again";
    g.info.set_state(rpc::PG_RESCHEDULING);
    g.info.set_why_pending("node " + ToHex(node_id).substr(0, 12) + " holding some of its bundles died");
    Publish(g);
    Schedule(id);
  }
  for (auto it = known_.begin(); it != known_.end();) {
    bool stale = false;
    for (const auto& b : it->second.bundles()) stale = stale || b.node_id() == node_id;
    it = stale ? known_.erase(it) : std::next(it);  // (looked up again when needed)
  }
}

Status PlacementGroups::OnBundleOp(rpc::MessageType type, const rpc::BundleOp& op) {
  if (op.pg_id().size() != kTaskIdSize) return Status::InvalidArgument("a placement group id has the wrong size");
  switch (type) {
    case rpc::BUNDLE_PREPARE: {
      ResourceSet r(std::map<std::string, double>(op.resources().begin(), op.resources().end()));
      return ledger_->Prepare(op.pg_id(), op.index(), r);
    }
    case rpc::BUNDLE_COMMIT: {
      Status st = ledger_->Commit(op.pg_id(), op.index());
      if (st.ok()) host_->Changed();
      return st;
    }
    case rpc::BUNDLE_RETURN:
      if (op.index() >= 0) {
        ledger_->Abort(op.pg_id(), op.index());
      } else {
        ledger_->ReturnGroup(op.pg_id());
        host_->ReturnedHere(op.pg_id());
        host_->Changed();
      }
      return Status::OK();
    default:
      return Status::InvalidArgument("not a bundle operation");
  }
}

}  // namespace phalanx::scheduler
