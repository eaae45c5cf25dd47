// HostStats: what the operating system says of this machine and of a
// process, read from /proc, /sys/fs/cgroup and statvfs for the node's
// Prometheus page (ray_node_* and ray_component_*, as Ray names them). Rates
// (CPU use, disk and network speeds) are over the time since the previous
// reading of the same HostStats; the first reading gives them since boot (or
// since the process started). A value the system does not give is absent
// (its field stays -1). Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace phalanx::scheduler {

struct MachineReading {
  int cpu_count = 0;
  double cpu_percent = -1;        // all CPUs busy: 100
  double mem_total = -1, mem_available = -1, mem_shared = -1;  // bytes
  double cgroup_mem_used = -1, cgroup_mem_limit = -1;          // this cgroup's (v1 or v2; no limit: the host's)
  double disk_total = -1, disk_free = -1;                       // the file system of the path asked
  double disk_read_bytes = -1, disk_write_bytes = -1;           // since boot, all block devices
  double disk_reads = -1, disk_writes = -1;                     // requests since boot
  double disk_read_speed = -1, disk_write_speed = -1;           // bytes/s
  double disk_read_iops = -1, disk_write_iops = -1;
  double net_received = -1, net_sent = -1;                      // bytes since boot, all interfaces but lo
  double net_receive_speed = -1, net_send_speed = -1;           // bytes/s
};

struct ProcessReading {
  double rss_bytes = -1, uss_bytes = -1, shared_bytes = -1;
  double cpu_percent = -1;  // one CPU busy: 100
  double num_fds = -1;      // open file descriptors
};

class HostStats {
 public:
  // The machine now; `disk_path` names the file system to measure (the session folder's).
  MachineReading Machine(const std::string& disk_path);
  // Process `pid` now (absent fields: it is gone, or not readable).
  ProcessReading Process(int pid);
  // Forgets the readings of processes not in `alive` (pids of exited clients).
  template <typename PidSet>
  void Keep(const PidSet& alive) {
    for (auto it = procs_.begin(); it != procs_.end();) it = alive.count(it->first) ? std::next(it) : procs_.erase(it);
  }

 private:
  struct Previous {
    double at = 0;  // seconds (CLOCK_MONOTONIC)
    double cpu_busy = 0, cpu_all = 0;
    double disk_read = 0, disk_write = 0, disk_reads = 0, disk_writes = 0;
    double net_in = 0, net_out = 0;
    bool valid = false;
  };
  Previous machine_;
  struct ProcPrevious {
    double at = 0, cpu_seconds = 0;
  };
  std::map<int, ProcPrevious> procs_;
};

}  // namespace phalanx::scheduler
