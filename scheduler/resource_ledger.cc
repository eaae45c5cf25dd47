#include "scheduler/resource_ledger.h"

#include "core/ids.h"

namespace phalanx::scheduler {

namespace {
// A bundle's placement marker: every task in the bundle asks for a sliver of
// it, so that even one asking for no resources runs on the bundle's node.
constexpr const char* kMarker = "bundle";
constexpr double kMarkerTotal = 1000;
constexpr double kMarkerEach = 0.001;
}  // namespace

ResourceLedger::ResourceLedger(ResourceSet total)
    : total_(total), available_(std::move(total)), gpus_(static_cast<int>(total_.Get("GPU"))) {}

std::string ResourceLedger::GroupKey(const std::string& base, const std::string& pg, int index) {
  if (index < 0) return base + "_group_" + ToHex(pg);
  return base + "_group_" + std::to_string(index) + "_" + ToHex(pg);
}

ResourceSet ResourceLedger::InBundle(const ResourceSet& need, const std::string& pg, int index) {
  ResourceSet out;
  for (const auto& [k, v] : need.amounts()) {
    if (v <= 0) {
      out.Set(k, v);  // (a queue key such as the language's, not an amount)
      continue;
    }
    out.Set(GroupKey(k, pg, -1), v);
    if (index >= 0) out.Set(GroupKey(k, pg, index), v);
  }
  out.Set(GroupKey(kMarker, pg, index), kMarkerEach);
  return out;
}

double ResourceLedger::GpuAmount(const ResourceSet& need) const {
  double gpus = need.Get("GPU");
  if (group_any_.empty()) return gpus;
  for (const auto& [k, v] : need.amounts()) {
    auto it = group_any_.find(k);
    if (it != group_any_.end() && it->second == "GPU") gpus += v;
  }
  return gpus;
}

bool ResourceLedger::TryAcquire(const ResourceSet& need, std::vector<int>* gpus) {
  if (!available_.Contains(need)) return false;
  auto ids = gpus_.Acquire(GpuAmount(need));
  if (!ids) return false;
  available_.Subtract(need);
  *gpus = std::move(*ids);
  return true;
}

void ResourceLedger::Release(const ResourceSet& need, const std::vector<int>& gpus, bool lent) {
  gpus_.Release(gpus, GpuAmount(need));
  if (lent) return;
  if (removed_.empty()) {
    available_.Add(need);
  } else {
    available_.Add(ForRelease(need));
  }
}

void ResourceLedger::Lent(const ResourceSet& r, int sign) {
  if (sign > 0) {
    available_.Add(r);
  } else {
    available_.Subtract(r);
  }
  if (group_of_.empty()) return;
  for (const auto& [k, v] : r.amounts()) {
    if (!group_of_.count(k)) continue;
    double& lent = lent_[k];
    lent += sign * v;
    if (lent < 1e-9) lent_.erase(k);
  }
}

ResourceSet ResourceLedger::ForRelease(const ResourceSet& need) const {
  if (removed_.empty()) return need;
  ResourceSet out;
  for (const auto& [k, v] : need.amounts()) {
    auto group = group_of_.find(k);
    if (group == group_of_.end() || !removed_.count(group->second)) {
      out.Set(k, out.Get(k) + v);
      continue;
    }
    // A removed group's: its "any bundle" amount goes back to the plain pool
    // (the per-bundle one and the marker are gone with the group).
    auto any = group_any_.find(k);
    if (any != group_any_.end() && any->second != kMarker) out.Set(any->second, out.Get(any->second) + v);
  }
  return out;
}

Status ResourceLedger::Prepare(const std::string& pg, int index, const ResourceSet& bundle) {
  if (removed_.count(pg)) return Status::InvalidArgument("placement group " + ToHex(pg) + " was removed");
  if (bundles_.count({pg, index})) return Status::OK();  // (asked again: already set aside)
  if (!available_.Contains(bundle)) {
    return Status::Unavailable("bundle " + std::to_string(index) + " " + bundle.ToString() +
                                      " does not fit in what is free here, " + available_.ToString());
  }
  if (bundle.Get("GPU") > 0 && bundle.Get("GPU") > gpus_.size()) {
    return Status::Unavailable("bundle " + std::to_string(index) + " asks for more GPUs than this node has");
  }
  available_.Subtract(bundle);
  bundles_[{pg, index}] = Bundle{bundle, false};
  return Status::OK();
}

Status ResourceLedger::Commit(const std::string& pg, int index) {
  auto it = bundles_.find({pg, index});
  if (it == bundles_.end()) {
    return Status::Unavailable("bundle " + std::to_string(index) + " of placement group " + ToHex(pg) +
                                      " was not prepared here");
  }
  if (it->second.committed) return Status::OK();
  it->second.committed = true;
  ResourceSet add = it->second.amounts;
  add.Set(kMarker, kMarkerTotal);
  for (const auto& [k, v] : add.amounts()) {
    if (v <= 0) continue;
    for (int i : {index, -1}) {
      std::string key = GroupKey(k, pg, i);
      total_.Set(key, total_.Get(key) + v);
      available_.Set(key, available_.Get(key) + v);
      group_of_[key] = pg;
      keys_of_[pg].insert(key);
      if (i < 0) group_any_[key] = k;
    }
  }
  return Status::OK();
}

void ResourceLedger::Abort(const std::string& pg, int index) {
  auto it = bundles_.find({pg, index});
  if (it == bundles_.end() || it->second.committed) return;
  available_.Add(it->second.amounts);
  bundles_.erase(it);
}

void ResourceLedger::ReturnGroup(const std::string& pg) {
  if (removed_.insert(pg).second) {
    removed_order_.push_back(pg);
    if (removed_order_.size() > kKeepRemoved) {
      removed_.erase(removed_order_.front());
      removed_order_.pop_front();
    }
  }
  std::set<std::string> bases;
  for (auto it = bundles_.lower_bound({pg, -1}); it != bundles_.end() && it->first.first == pg;) {
    const Bundle& b = it->second;
    if (!b.committed) {
      available_.Add(b.amounts);
    } else {
      int index = it->first.second;
      for (const auto& [k, v] : b.amounts.amounts()) bases.insert(k);
      bases.insert(kMarker);
      for (const auto& k : bases) {
        total_.Erase(GroupKey(k, pg, index));
        available_.Erase(GroupKey(k, pg, index));
      }
    }
    it = bundles_.erase(it);
  }
  // What no task of the group holds now goes back to the plain pool; what
  // they hold comes back as they release it (ForRelease).
  bool held = false;  // does a task still hold some of it?
  for (const auto& base : bases) {
    std::string any = GroupKey(base, pg, -1);
    held = held || available_.Get(any) + 1e-9 < total_.Get(any) || lent_.count(any);
    if (base != kMarker) available_.Set(base, available_.Get(base) + available_.Get(any));
    total_.Erase(any);
    available_.Erase(any);
  }
  auto keys = keys_of_.find(pg);
  if (!held && keys != keys_of_.end()) {  // nothing comes back under its names: forget them (a create+remove loop keeps nothing)
    for (const auto& k : keys->second) {
      group_any_.erase(k);
      group_of_.erase(k);
      lent_.erase(k);
    }
    keys_of_.erase(keys);
  }
}

std::vector<int> ResourceLedger::BundlesOf(const std::string& pg) const {
  std::vector<int> out;
  for (auto it = bundles_.lower_bound({pg, -1}); it != bundles_.end() && it->first.first == pg; ++it) {
    if (it->second.committed) out.push_back(it->first.second);
  }
  return out;
}

}  // namespace phalanx::scheduler
