// MetricsRegistry: the metrics this node's drivers and workers record
// (phalanx.util.metrics: Ray's ray.util.metrics Counter, Gauge, Histogram),
// kept for the node's Prometheus endpoint (scheduler/metrics_exporter.h).
// A client reports each series whose value changed, whole (METRICS_REPORT);
// the registry keeps the latest of each series of each client. When a client
// goes, its gauges go with it, and its counters and histograms stay (their
// totals do not fall back), until the node holds kMaxSeries: then the oldest
// of those go first, and a new series past the limit is not kept (a warning
// says so once per client). Every name, size and count of a report is
// checked first: a malformed report is refused whole. The page names each
// user metric ray_<name> (a counter ray_<name>_total, as Ray) and labels it
// with its tags (the client adds JobId and Version), then Component,
// NodeAddress, SessionName and WorkerId.
// Not thread-safe; the raylet's loop.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <unordered_set>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "scheduler/clients.h"
#include "scheduler/prometheus_text.h"
#include "scheduler/router.h"

namespace phalanx::scheduler {

class MetricsRegistry final : public ClientWatcher {
 public:
  // `node_ip` and `session_name`: each series' NodeAddress and SessionName labels.
  MetricsRegistry(std::string node_ip, std::string session_name)
      : node_ip_(std::move(node_ip)), session_name_(std::move(session_name)) {}

  // Its client message: METRICS_REPORT (from drivers and workers).
  void AddRoutes(Router& router);
  // Keeps each series of `report` as the latest of `c`'s. Not OK, keeping
  // nothing of it, when a series is malformed (the status says which and why).
  Status Merge(const Client& c, const rpc::MetricsReport& report);
  // ClientWatcher: its gauges go; its counters and histograms stay.
  void OnClientGone(Client& c, const std::string& why) override;
  // Every family, onto `page`.
  void Render(PrometheusText* page) const;
  size_t num_series() const { return series_.size(); }

  // What one series may be.
  static constexpr size_t kMaxName = 128;
  static constexpr size_t kMaxDescription = 1024;
  static constexpr int kMaxTags = 32;
  static constexpr size_t kMaxTagBytes = 256;   // a tag's key, and its value
  static constexpr int kMaxBoundaries = 256;    // a histogram's buckets
  static constexpr size_t kMaxSeries = 20000;   // on this node, clients gone included

  // OK if `s` is well-formed within the limits above; else why not.
  static Status Check(const rpc::MetricSeries& s);

 private:
  struct Series {
    rpc::MetricSeries data;
    std::string owner;      // the client's id, hex
      bool gone = false;      // its client left (counters and histograms only)
  };
  // The key: name, then owner, then tags: a family's series are neighbours in the map.
  static std::string KeyOf(const rpc::MetricSeries& s, const std::string& owner);
  MetricLabels LabelsOf(const Series& s) const;
  // Room for one more series: the oldest of gone clients' go first. False when there is none.
  bool MakeRoom();

  std::string node_ip_;
  std::string session_name_;
  std::map<std::string, Series> series_;
  std::deque<std::string> gone_order_;                 // keys of gone clients' series, oldest first
  std::unordered_set<std::string> warned_;              // clients told of the limit
};

}  // namespace phalanx::scheduler
