// MetricsPage: the page the node's Prometheus endpoint serves
// (scheduler/metrics_exporter.h): this node's system metrics, named as Ray
// names them (docs/observability.md lists each: ray_tasks, ray_actors,
// ray_resources, ray_object_store_memory, ray_placement_groups,
// ray_node_cpu_*, ray_node_mem_*, ray_node_disk_*, ray_node_network_*,
// ray_component_*, ray_cluster_*), read from the raylet's parts and the
// operating system at each scrape, then the metrics its drivers and workers
// recorded (MetricsRegistry). Every system series is labelled with the
// node's address, the session and the version (PHALANX_VERSION, the
// package's). The GCS's process (the head's redis-server) is the component
// Ray calls gcs_server. Not thread-safe; the raylet's loop.
#pragma once

#include <string>

#include "scheduler/clients.h"
#include "scheduler/host_stats.h"
#include "scheduler/inspection.h"
#include "scheduler/metrics_exporter.h"
#include "scheduler/metrics_registry.h"
#include "scheduler/placement_groups.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/task_table.h"

namespace phalanx::scheduler {

// What the page reads: the raylet's parts, owned by it and outliving the page.
struct MetricsPageParts {
  const Inspection* inspection;   // the store's and the queue's counters
  const TaskInspection* tasks;    // resources in all and free
  const ActorCensus* actors;
  const PlacementGroups* groups;  // those coordinated here
  const Clients* clients;         // drivers and workers (their pids)
  const PeerView* peers;
  const MetricsRegistry* registry;
};

class MetricsPage final : public MetricsSource {
 public:
  // `gcs_pid_file`: the head's redis-server's pid file (its process is the page's gcs_server
  // component); empty on other nodes.
  MetricsPage(std::string node_ip, std::string session_dir, std::string gcs_pid_file, MetricsPageParts parts);
  // The session's name: the last part of its folder ("session_2026-12-07_11-09-29_123").
  static std::string SessionName(const std::string& session_dir);
  std::string RenderMetrics() override;

 private:
  void System(PrometheusText* page);
  void Machine(PrometheusText* page);
  void Components(PrometheusText* page);
  // The node's labels and `more`.
  MetricLabels Labels(MetricLabels more = {}) const;

  std::string node_ip_;
  std::string session_dir_;
  std::string session_name_;
  std::string gcs_pid_file_;
  MetricsPageParts parts_;
  HostStats host_;
};

}  // namespace phalanx::scheduler
