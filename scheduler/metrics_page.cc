#include "scheduler/metrics_page.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <set>

namespace phalanx::scheduler {

MetricsPage::MetricsPage(std::string node_ip, std::string session_dir, std::string gcs_pid_file,
                         MetricsPageParts parts)
    : node_ip_(std::move(node_ip)), session_dir_(std::move(session_dir)), session_name_(SessionName(session_dir_)),
      gcs_pid_file_(std::move(gcs_pid_file)), parts_(parts) {
  host_.Machine(session_dir_);  // (the first scrape's rates count from here)
}

std::string MetricsPage::SessionName(const std::string& session_dir) {
  std::string dir = session_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.substr(dir.rfind('/') + 1);
}

MetricLabels MetricsPage::Labels(MetricLabels more) const {
  bool has_component = false;
  for (const auto& l : more) has_component |= l.first == "Component";
  if (!has_component) more.emplace_back("Component", "raylet");  // (who reports it, as Ray's labels say)
  more.emplace_back("NodeAddress", node_ip_);
  more.emplace_back("SessionName", session_name_);
  more.emplace_back("Version", PHALANX_VERSION);
  return more;
}

std::string MetricsPage::RenderMetrics() {
  PrometheusText page;
  System(&page);
  Machine(&page);
  Components(&page);
  parts_.registry->Render(&page);  // (after the system's: a user metric of the same name is skipped)
  return page.text();
}

void MetricsPage::System(PrometheusText* page) {
  rpc::StatsReply c = parts_.inspection->Counters();
  if (page->Family("ray_tasks", "gauge", "Tasks on this node by state (finished and failed: since the raylet started)")) {
    page->Sample("ray_tasks", Labels({{"State", "PENDING_NODE_ASSIGNMENT"}}), static_cast<double>(c.tasks_queued()));
    page->Sample("ray_tasks", Labels({{"State", "RUNNING"}}), static_cast<double>(c.tasks_running()));
    page->Sample("ray_tasks", Labels({{"State", "FINISHED"}}), static_cast<double>(c.tasks_finished()));
    page->Sample("ray_tasks", Labels({{"State", "FAILED"}}), static_cast<double>(c.tasks_failed()));
  }
  if (page->Family("ray_actors", "gauge", "Actors whose home is this node, by state")) {
    page->Sample("ray_actors", Labels({{"State", "ALIVE"}}), static_cast<double>(parts_.actors->num_alive()));
  }
  if (page->Family("ray_resources", "gauge", "This node's logical resources, used and available")) {
    const ResourceSet& total = parts_.tasks->total();
    const ResourceSet& free = parts_.tasks->available();
    for (const auto& [name, amount] : total.amounts()) {
      double available = free.Get(name);
      page->Sample("ray_resources", Labels({{"Name", name}, {"State", "AVAILABLE"}}), available);
      page->Sample("ray_resources", Labels({{"Name", name}, {"State", "USED"}}), amount - available);
    }
  }
  if (page->Family("ray_object_store_memory", "gauge", "Bytes of objects in this node's store, and spilled to its disk")) {
    page->Sample("ray_object_store_memory", Labels({{"Location", "MMAP_SHM"}, {"ObjectState", "SEALED"}}),
                 static_cast<double>(c.store_used()));
    page->Sample("ray_object_store_memory", Labels({{"Location", "SPILLED"}, {"ObjectState", "SEALED"}}),
                 static_cast<double>(c.spilled_bytes()));
  }
  if (page->Family("ray_object_store_available_memory", "gauge", "Bytes free in this node's store")) {
    page->Sample("ray_object_store_available_memory", Labels(),
                 static_cast<double>(c.store_capacity() - std::min(c.store_capacity(), c.store_used())));
  }
  if (page->Family("ray_object_store_num_local_objects", "gauge", "Objects in this node's store")) {
    page->Sample("ray_object_store_num_local_objects", Labels(), static_cast<double>(c.store_objects()));
  }
  if (page->Family("ray_spill_manager_objects_bytes", "gauge", "Bytes spilled and restored since the raylet started")) {
    page->Sample("ray_spill_manager_objects_bytes", Labels({{"Type", "Spilled"}}), static_cast<double>(c.spilled_total_bytes()));
    page->Sample("ray_spill_manager_objects_bytes", Labels({{"Type", "Restored"}}), static_cast<double>(c.restored_total_bytes()));
  }
  if (page->Family("ray_placement_groups", "gauge", "Placement groups this node coordinates, by state")) {
    std::map<std::string, double> by_state{{"PENDING", 0}, {"CREATED", 0}, {"REMOVED", 0}, {"RESCHEDULING", 0}};
    parts_.groups->ForEach([&](const rpc::PlacementGroupInfo& g) {
      switch (g.state()) {
        case rpc::PG_PENDING: by_state["PENDING"] += 1; break;
        case rpc::PG_CREATED: by_state["CREATED"] += 1; break;
        case rpc::PG_REMOVED: by_state["REMOVED"] += 1; break;
        case rpc::PG_RESCHEDULING: by_state["RESCHEDULING"] += 1; break;
        default: break;
      }
    });
    for (const auto& [state, n] : by_state) page->Sample("ray_placement_groups", Labels({{"State", state}}), n);
  }
  if (page->Family("ray_cluster_active_nodes", "gauge", "Nodes alive, as this node sees the cluster")) {
    page->Sample("ray_cluster_active_nodes", Labels(), static_cast<double>(parts_.peers->peers_alive() + 1));
  }
  if (page->Family("ray_cluster_failed_nodes", "gauge", "Nodes the cluster holds dead, as this node sees it")) {
    page->Sample("ray_cluster_failed_nodes", Labels(), static_cast<double>(parts_.peers->peers_dead()));
  }
  if (page->Family("ray_cluster_pending_nodes", "gauge",
                   "Nodes being launched (phalanx launches none by itself: `phalanx up` starts them at once)")) {
    page->Sample("ray_cluster_pending_nodes", Labels(), 0);
  }
}

void MetricsPage::Machine(PrometheusText* page) {
  MachineReading m = host_.Machine(session_dir_);
  auto gauge = [&](const char* name, const char* help, double v) {
    if (v >= 0 && page->Family(name, "gauge", help)) page->Sample(name, Labels(), v);
  };
  gauge("ray_node_cpu_count", "CPUs of this machine", m.cpu_count);
  gauge("ray_node_cpu_utilization", "Percent of this machine's CPU time busy since the last scrape", m.cpu_percent);
  gauge("ray_node_gpus_available", "GPUs this node offers", parts_.tasks->total().Get("GPU"));
  gauge("ray_node_mem_total", "Bytes of memory", m.mem_total);
  gauge("ray_node_mem_available", "Bytes of memory available", m.mem_available);
  if (m.mem_total >= 0 && m.mem_available >= 0) gauge("ray_node_mem_used", "Bytes of memory used", m.mem_total - m.mem_available);
  gauge("ray_node_mem_shared_bytes", "Bytes of shared memory (tmpfs and shm), the object store's included", m.mem_shared);
  gauge("ray_node_mem_total_host", "Bytes of the host's memory", m.mem_total);
  if (m.mem_total >= 0 && m.mem_available >= 0) gauge("ray_node_mem_used_host", "Bytes of the host's memory used", m.mem_total - m.mem_available);
  gauge("ray_node_cgroup_mem_used", "Bytes this node's cgroup uses", m.cgroup_mem_used);
  gauge("ray_node_cgroup_mem_total", "This node's cgroup memory limit", m.cgroup_mem_limit);
  if (m.disk_total >= 0) gauge("ray_node_disk_usage", "Bytes used on the session folder's file system", m.disk_total - m.disk_free);
  gauge("ray_node_disk_free", "Bytes free on the session folder's file system", m.disk_free);
  if (m.disk_total > 0) {
    gauge("ray_node_disk_utilization_percentage", "Percent of the session folder's file system used",
          100.0 * (m.disk_total - m.disk_free) / m.disk_total);
  }
  gauge("ray_node_disk_io_read", "Bytes read from the machine's disks since boot", m.disk_read_bytes);
  gauge("ray_node_disk_io_write", "Bytes written to the machine's disks since boot", m.disk_write_bytes);
  gauge("ray_node_disk_io_read_count", "Reads from the machine's disks since boot", m.disk_reads);
  gauge("ray_node_disk_io_write_count", "Writes to the machine's disks since boot", m.disk_writes);
  gauge("ray_node_disk_io_read_speed", "Bytes/s read since the last scrape", m.disk_read_speed);
  gauge("ray_node_disk_io_write_speed", "Bytes/s written since the last scrape", m.disk_write_speed);
  gauge("ray_node_disk_read_iops", "Reads/s since the last scrape", m.disk_read_iops);
  gauge("ray_node_disk_write_iops", "Writes/s since the last scrape", m.disk_write_iops);
  gauge("ray_node_network_received", "Bytes received since boot (all interfaces but lo)", m.net_received);
  gauge("ray_node_network_sent", "Bytes sent since boot (all interfaces but lo)", m.net_sent);
  gauge("ray_node_network_receive_speed", "Bytes/s received since the last scrape", m.net_receive_speed);
  gauge("ray_node_network_send_speed", "Bytes/s sent since the last scrape", m.net_send_speed);
}

void MetricsPage::Components(PrometheusText* page) {
  // Each component's processes, summed: the raylet, the workers, the drivers.
  std::map<std::string, ProcessReading> sum;
  std::set<int> pids;
  auto add = [&](const std::string& component, int pid) {
    ProcessReading p = host_.Process(pid);
    if (p.rss_bytes < 0) return;
    pids.insert(pid);
    ProcessReading& s = sum.emplace(component, ProcessReading{0, 0, 0, 0, 0}).first->second;
    s.rss_bytes += p.rss_bytes;
    s.uss_bytes += std::max(0.0, p.uss_bytes);
    s.shared_bytes += std::max(0.0, p.shared_bytes);
    s.cpu_percent += std::max(0.0, p.cpu_percent);
    s.num_fds += std::max(0.0, p.num_fds);
  };
  add("raylet", static_cast<int>(::getpid()));
  if (!gcs_pid_file_.empty()) {
    std::ifstream in(gcs_pid_file_);
    int pid = 0;
    if (in >> pid && pid > 0) add("gcs_server", pid);
  }
  parts_.clients->ForEach([&](Client& c) {
    if (c.registered && c.pid > 0) add(c.is_worker ? "core_worker" : "driver", c.pid);
  });
  host_.Keep(pids);
  struct Field {
    const char* name;
    const char* help;
    double ProcessReading::*value;
    double scale;
  };
  const Field fields[] = {
      {"ray_component_rss_bytes", "Resident bytes of the node's processes, by component", &ProcessReading::rss_bytes, 1},
      {"ray_component_rss_mb", "Resident MiB of the node's processes, by component", &ProcessReading::rss_bytes, 1.0 / (1 << 20)},
      {"ray_component_uss_bytes", "Bytes only these processes hold (private), by component", &ProcessReading::uss_bytes, 1},
      {"ray_component_uss_mb", "MiB only these processes hold (private), by component", &ProcessReading::uss_bytes, 1.0 / (1 << 20)},
      {"ray_component_shared_bytes", "Resident bytes shared with others (files, shared memory), by component",
       &ProcessReading::shared_bytes, 1},
      {"ray_component_num_fds", "Open file descriptors, by component", &ProcessReading::num_fds, 1},
      {"ray_component_cpu_percentage", "Percent of one CPU used since the last scrape, by component",
       &ProcessReading::cpu_percent, 1},
  };
  for (const Field& f : fields) {
    if (!page->Family(f.name, "gauge", f.help)) continue;
    for (const auto& [component, reading] : sum) {
      page->Sample(f.name, Labels({{"Component", component}}), reading.*(f.value) * f.scale);
    }
  }
}

}  // namespace phalanx::scheduler
