#include "scheduler/cluster_view.h"

#include <algorithm>
#include <cstdlib>

#include "core/ids.h"

namespace phalanx::scheduler {

ResourceSet ClusterView::Total(const rpc::NodeInfo& n) {
  ResourceSet r;
  for (const auto& [k, v] : n.resources_total()) r.Set(k, v);
  return r;
}

ResourceSet ClusterView::Available(const rpc::NodeInfo& n) {
  ResourceSet r;
  for (const auto& [k, v] : n.resources_available()) r.Set(k, v);
  return r;
}

void ClusterView::Update(const std::vector<rpc::NodeInfo>& nodes,
                         const std::unordered_map<std::string, std::string>& heartbeats, int64_t now_ms) {
  nodes_.clear();
  reserved_.clear();
  silent_.clear();
  std::unordered_map<std::string, Beat> beats;
  for (const auto& n : nodes) {
    if (n.node_id() == self_ || !n.alive()) continue;
    auto hb = heartbeats.find(ToHex(n.node_id()));
    std::string value = hb != heartbeats.end() ? hb->second : "t" + std::to_string(n.heartbeat_ms());
    Beat& b = beats[n.node_id()];
    auto seen = beats_.find(n.node_id());
    if (seen == beats_.end() || seen->second.value != value) {
      b = Beat{value, now_ms};  // news from it (or the first look at it)
    } else {
      b = seen->second;
    }
    // The lateness its own heartbeat thread reports ("seq:late_ms"), at most dead_after_ms more.
    int64_t late = 0;
    auto colon = value.find(':');
    if (colon != std::string::npos) late = std::strtoll(value.c_str() + colon + 1, nullptr, 10);
    late = std::clamp<int64_t>(late, 0, dead_after_ms_);
    if (now_ms - b.changed_at > dead_after_ms_ + late) {
      silent_.push_back(n);
      continue;
    }
    auto s = suspects_.find(n.node_id());
    if (s != suspects_.end()) {
      if (value == s->second) continue;  // not heard from since it failed us
      suspects_.erase(s);
    }
    nodes_[n.node_id()] = n;
  }
  beats_ = std::move(beats);
}

void ClusterView::Forgive(int64_t now_ms) {
  for (auto& [id, b] : beats_) b.changed_at = now_ms;
}

void ClusterView::Suspect(const std::string& node_id) {
  auto b = beats_.find(node_id);
  suspects_[node_id] = b == beats_.end() ? std::string() : b->second.value;
  nodes_.erase(node_id);
}

const rpc::NodeInfo* ClusterView::PickNode(const ResourceSet& need) const {
  const rpc::NodeInfo* best = nullptr;
  double best_cpu = -1;
  for (const auto& [id, n] : nodes_) {
    ResourceSet avail = Available(n);
    auto r = reserved_.find(id);
    if (r != reserved_.end()) avail.Subtract(r->second);
    if (!avail.Contains(need)) continue;
    if (avail.Get("CPU") > best_cpu) {
      best = &n;
      best_cpu = avail.Get("CPU");
    }
  }
  return best;
}

bool ClusterView::FitsSomewhere(const ResourceSet& need, const ResourceSet& self_total) const {
  if (self_total.Contains(need)) return true;
  for (const auto& [id, n] : nodes_) {
    if (Total(n).Contains(need)) return true;
  }
  return false;
}

const rpc::NodeInfo* ClusterView::Find(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::vector<const rpc::NodeInfo*> ClusterView::Others() const {
  std::vector<const rpc::NodeInfo*> out;
  for (const auto& [id, n] : nodes_) out.push_back(&n);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->node_id() < b->node_id(); });
  return out;
}

ResourceSet ClusterView::Free(const rpc::NodeInfo& n) const {
  ResourceSet avail = Available(n);
  auto r = reserved_.find(n.node_id());
  if (r != reserved_.end()) avail.Subtract(r->second);
  return avail;
}

void ClusterView::Reserve(const std::string& node_id, const ResourceSet& need) { reserved_[node_id].Add(need); }


}  // namespace phalanx::scheduler
