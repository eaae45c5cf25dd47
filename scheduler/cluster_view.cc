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
  dead_ = 0;
  std::unordered_map<std::string, Beat> beats;
  for (const auto& n : nodes) {
    if (n.node_id() == self_ && !n.labels().empty()) self_labels_ = n.labels();
    if (n.node_id() != self_ && !n.alive()) ++dead_;
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

const rpc::NodeInfo* ClusterView::PickNode(const ResourceSet& need, const LabelConstraints* selector) const {
  const rpc::NodeInfo* best = nullptr;
  double best_cpu = -1;
  for (const auto& [id, n] : nodes_) {
    if (selector != nullptr && !LabelsMatch(n.labels(), *selector)) continue;
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

const LabelConstraints* ClusterView::SelectorFor(const rpc::TaskSpec& spec, const ResourceSet& need,
                                                 const ResourceSet& self_total) const {
  return ApplicableSelector(spec, [&](const LabelConstraints& c) {
    if (LabelsMatch(self_labels_, c) && self_total.Contains(need)) return true;
    for (const auto& [id, n] : nodes_) {
      if (LabelsMatch(n.labels(), c) && Total(n).Contains(need)) return true;
    }
    return false;
  });
}

Result<std::string> ClusterView::PlaceByLabels(const rpc::TaskSpec& spec, const ResourceSet& need,
                                               const ResourceSet& self_total, const ResourceSet& self_free) const {
  // Room now, selector by selector (a NodeLabelSchedulingStrategy's soft expressions are a first selector
  // whose fallback is its hard ones: a node with both is taken when it has room, else one with the hard ones).
  std::vector<const LabelConstraints*> selectors{&spec.label_selector()};
  for (const auto& f : spec.label_fallbacks()) selectors.push_back(&f.constraints());
  for (const LabelConstraints* s : selectors) {
    if (LabelsMatch(self_labels_, *s) && self_free.Contains(need)) return std::string();
    if (const rpc::NodeInfo* n = PickNode(need, s)) return n->node_id();
  }
  const LabelConstraints* selector = SelectorFor(spec, need, self_total);
  if (selector == nullptr) {
    std::string why = "no live node has the labels " + DescribeSelector(spec.label_selector());
    for (const auto& f : spec.label_fallbacks()) why += " or " + DescribeSelector(f.constraints());
    why += " and room for " + need.ToString() + "; the nodes' labels: ";
    auto describe = [](const std::string& id, const NodeLabels& labels) {
      std::string out = ToHex(id).substr(0, 12) + " {";
      std::vector<std::string> pairs;
      for (const auto& [k, v] : labels) {
        if (k != "ray.io/node-id") pairs.push_back(k + "=" + v);
      }
      std::sort(pairs.begin(), pairs.end());
      for (size_t i = 0; i < pairs.size(); ++i) out += (i ? ", " : "") + pairs[i];
      return out + "}";
    };
    why += describe(self_, self_labels_);
    for (const rpc::NodeInfo* n : Others()) why += ", " + describe(n->node_id(), n->labels());
    return Status(StatusCode::kInfeasible, why);
  }
  if (LabelsMatch(self_labels_, *selector) && self_total.Contains(need)) return std::string();
  if (const rpc::NodeInfo* n = PickNode(need, selector)) return n->node_id();
  for (const rpc::NodeInfo* n : Others()) {  // none has room now: the first that could ever hold it (it waits there)
    if (LabelsMatch(n->labels(), *selector) && Total(*n).Contains(need)) return n->node_id();
  }
  return std::string();  // (not reached: SelectorFor found one)
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
