#include "scheduler/metrics_registry.h"

#include <cmath>

#include "core/ids.h"
#include "core/logging.h"

namespace phalanx::scheduler {

namespace {

bool IsMetricName(const std::string& s) {
  if (s.empty() || s.size() > MetricsRegistry::kMaxName) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Status MetricsRegistry::Check(const rpc::MetricSeries& s) {
  auto bad = [&](const std::string& why) { return Status::InvalidArgument("metric '" + s.name().substr(0, kMaxName) + "': " + why); };
  if (!IsMetricName(s.name())) return bad("a name is 1 to 128 of [a-zA-Z0-9_:], not starting with a digit");
  if (s.description().size() > kMaxDescription) return bad("a description is at most 1 KiB");
  if (s.tag_keys_size() > kMaxTags || s.tag_keys_size() != s.tag_values_size()) {
    return bad("at most 32 tags, a value for each key");
  }
  for (int i = 0; i < s.tag_keys_size(); ++i) {
    if (s.tag_keys(i).empty() || s.tag_keys(i).size() > kMaxTagBytes || s.tag_values(i).size() > kMaxTagBytes) {
      return bad("a tag key is 1 to 256 bytes, a value at most 256");
    }
  }
  if (s.kind() == rpc::MetricSeries::HISTOGRAM) {
    if (s.boundaries_size() < 1 || s.boundaries_size() > kMaxBoundaries ||
        s.bucket_counts_size() != s.boundaries_size() + 1) {
      return bad("a histogram has 1 to 256 boundaries and a count for each bucket and +Inf");
    }
    for (int i = 0; i < s.boundaries_size(); ++i) {
      if (!std::isfinite(s.boundaries(i)) || (i > 0 && s.boundaries(i) <= s.boundaries(i - 1))) {
        return bad("a histogram's boundaries are finite and ascending");
      }
    }
  } else if (s.boundaries_size() != 0 || s.bucket_counts_size() != 0) {
    return bad("only a histogram has buckets");
  } else if (s.kind() != rpc::MetricSeries::COUNTER && s.kind() != rpc::MetricSeries::GAUGE) {
    return bad("unknown kind");
  }
  return Status::OK();
}

std::string MetricsRegistry::KeyOf(const rpc::MetricSeries& s, const std::string& owner) {
  std::string key = s.name() + '\0' + owner;
  for (int i = 0; i < s.tag_keys_size(); ++i) key += '\0' + s.tag_keys(i) + '\1' + s.tag_values(i);
  return key;
}

void MetricsRegistry::AddRoutes(Router& router) {
  router.OnClient(rpc::METRICS_REPORT, "metrics report",
                  [this](const std::shared_ptr<Client>& c, uint64_t, const char* b, size_t n) {
                    rpc::MetricsReport m;
                    if (!ParseBody(&m, b, n)) return false;
                    Status st = Merge(*c, m);
                    if (!st.ok()) PHALANX_LOG(Warning) << "metrics report of process " << c->pid << " refused: " << st.message();
                    return st.ok();
                  });
}

bool MetricsRegistry::MakeRoom() {
  while (series_.size() >= kMaxSeries && !gone_order_.empty()) {
    series_.erase(gone_order_.front());
    gone_order_.pop_front();
  }
  return series_.size() < kMaxSeries;
}

Status MetricsRegistry::Merge(const Client& c, const rpc::MetricsReport& report) {
  for (const auto& s : report.series()) PHALANX_RETURN_IF_ERROR(Check(s));
  std::string owner = ToHex(c.client_id);
  for (const auto& s : report.series()) {
    std::string key = KeyOf(s, owner);
    auto it = series_.find(key);
    if (it == series_.end()) {
      if (!MakeRoom()) {
        if (warned_.insert(owner).second) {
          PHALANX_LOG(Warning) << "metrics: this node keeps " << kMaxSeries << " series; process " << c.pid
                               << "'s new ones are not kept";
        }
        continue;
      }
      it = series_.emplace(key, Series{}).first;
      it->second.owner = owner;
    }
    it->second.data = s;
  }
  return Status::OK();
}

void MetricsRegistry::OnClientGone(Client& c, const std::string&) {
  std::string owner = ToHex(c.client_id);
  warned_.erase(owner);
  for (auto it = series_.begin(); it != series_.end();) {
    Series& s = it->second;
    if (s.owner != owner || s.gone) {
      ++it;
    } else if (s.data.kind() == rpc::MetricSeries::GAUGE) {
      it = series_.erase(it);
    } else {
      s.gone = true;
      gone_order_.push_back(it->first);
      ++it;
    }
  }
}

MetricLabels MetricsRegistry::LabelsOf(const Series& s) const {
  MetricLabels labels;
  for (int i = 0; i < s.data.tag_keys_size(); ++i) labels.emplace_back(s.data.tag_keys(i), s.data.tag_values(i));
  auto add = [&](const char* key, const std::string& value) {
    for (const auto& l : labels) {
      if (l.first == key) return;  // (a tag of the user's own by that name wins)
    }
    labels.emplace_back(key, value);
  };
  add("Component", "core_worker");  // (a driver is a core worker too, in Ray's words)
  add("NodeAddress", node_ip_);
  add("SessionName", session_name_);
  add("WorkerId", s.owner);
  return labels;
}

void MetricsRegistry::Render(PrometheusText* page) const {
  auto it = series_.begin();
  while (it != series_.end()) {
    const rpc::MetricSeries& first = it->second.data;
    const std::string name = "ray_" + first.name();
    const auto kind = first.kind();
    auto end = it;
    while (end != series_.end() && end->second.data.name() == first.name()) ++end;
    // A counter: ray_<name>_total (as Ray's OpenTelemetry exporter; a name ending in _total keeps one).
    if (kind == rpc::MetricSeries::COUNTER) {
      std::string total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0 ? name : name + "_total";
      if (page->Family(total, "counter", first.description())) {
        for (auto s = it; s != end; ++s) {
          if (s->second.data.kind() == kind) page->Sample(total, LabelsOf(s->second), s->second.data.value());
        }
      }
    } else if (kind == rpc::MetricSeries::GAUGE) {
      if (page->Family(name, "gauge", first.description())) {
        for (auto s = it; s != end; ++s) {
          if (s->second.data.kind() == kind) page->Sample(name, LabelsOf(s->second), s->second.data.value());
        }
      }
    } else if (page->Family(name, "histogram", first.description())) {
      for (auto s = it; s != end; ++s) {
        const rpc::MetricSeries& h = s->second.data;
        if (h.kind() != kind) continue;
        MetricLabels labels = LabelsOf(s->second);
        uint64_t cumulative = 0;
        for (int b = 0; b < h.bucket_counts_size(); ++b) {
          cumulative += h.bucket_counts(b);
          std::pair<std::string, std::string> le{
              "le", b < h.boundaries_size() ? PrometheusText::Number(h.boundaries(b)) : std::string("+Inf")};
          page->Sample(name + "_bucket", labels, static_cast<double>(cumulative), &le);
        }
        page->Sample(name + "_sum", labels, h.value());
        page->Sample(name + "_count", labels, static_cast<double>(cumulative));
      }
    }
    it = end;
  }
}

}  // namespace phalanx::scheduler
