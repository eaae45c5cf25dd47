#include "scheduler/host_stats.h"

#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace phalanx::scheduler {

namespace {

double Now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// "Key:   123 kB" lines (/proc/meminfo, /proc/PID/status, smaps_rollup): key -> bytes.
std::map<std::string, double> KbTable(const std::string& path) {
  std::map<std::string, double> out;
  std::ifstream in(path);
  std::string key;
  double value;
  std::string unit;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (!(ls >> key >> value)) continue;
    if (!key.empty() && key.back() == ':') key.pop_back();
    ls >> unit;
    out[key] = unit == "kB" ? value * 1024 : value;
  }
  return out;
}

double ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s) || s == "max") return -1;
  try {
    return std::stod(s);
  } catch (...) {
    return -1;
  }
}

// This process's memory cgroup: its use and limit (-1: unlimited or unknown), v2 or v1, at the path
// /proc/self/cgroup names under the mount, else at the mount's root (a container's own cgroup namespace).
void CgroupMemory(double* used, double* limit) {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  bool v1 = false;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
    std::istringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');) {
      if (c == "memory") {
        v1 = true;
        v1_path = path;
      }
    }
  }
  auto read_pair = [&](const std::string& dir, const char* use_file, const char* limit_file) {
    double u = ReadNumber(dir + "/" + use_file);
    if (u < 0) return false;
    *used = u;
    double l = ReadNumber(dir + "/" + limit_file);
    *limit = l >= 0 && l < 1e18 ? l : -1;  // (v1 writes ~2^63 for no limit)
    return true;
  };
  if (v1) {
    if (read_pair("/sys/fs/cgroup/memory" + v1_path, "memory.usage_in_bytes", "memory.limit_in_bytes")) return;
    if (read_pair("/sys/fs/cgroup/memory", "memory.usage_in_bytes", "memory.limit_in_bytes")) return;
  }
  if (!v2_path.empty() && read_pair("/sys/fs/cgroup" + v2_path, "memory.current", "memory.max")) return;
  read_pair("/sys/fs/cgroup", "memory.current", "memory.max");
}

double Rate(double now_value, double then_value, double seconds) {
  return seconds > 0 && now_value >= then_value ? (now_value - then_value) / seconds : -1;
}

}  // namespace

MachineReading HostStats::Machine(const std::string& disk_path) {
  MachineReading r;
  Previous now;
  now.at = Now();
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  r.cpu_count = cpus > 0 ? static_cast<int>(cpus) : 0;
  {
    std::ifstream in("/proc/stat");
    std::string cpu;
    double v[10] = {0};
    if (in >> cpu && cpu == "cpu") {
      for (double& x : v) in >> x;
      double idle = v[3] + v[4];
      double all = 0;
      for (int i = 0; i < 8; ++i) all += v[i];  // (guest time is counted in user already)
      now.cpu_busy = all - idle;
      now.cpu_all = all;
    }
  }
  auto mem = KbTable("/proc/meminfo");
  if (mem.count("MemTotal")) r.mem_total = mem["MemTotal"];
  if (mem.count("MemAvailable")) r.mem_available = mem["MemAvailable"];
  if (mem.count("Shmem")) r.mem_shared = mem["Shmem"];
  CgroupMemory(&r.cgroup_mem_used, &r.cgroup_mem_limit);
  if (r.cgroup_mem_used >= 0 && r.cgroup_mem_limit < 0) r.cgroup_mem_limit = r.mem_total;  // (no limit: the host's)
  struct statvfs fs {};
  if (::statvfs(disk_path.c_str(), &fs) == 0) {
    r.disk_total = static_cast<double>(fs.f_blocks) * static_cast<double>(fs.f_frsize);
    r.disk_free = static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
  }
  {
    std::ifstream in("/proc/diskstats");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      int major, minor;
      std::string name;
      double f[11] = {0};
      if (!(ls >> major >> minor >> name)) continue;
      for (double& x : f) ls >> x;
      // Whole devices only (partitions are counted in theirs), no loop or ram devices.
      if (name.rfind("loop", 0) == 0 || name.rfind("ram", 0) == 0) continue;
      if (std::ifstream("/sys/block/" + name + "/stat").fail()) continue;
      now.disk_reads += f[0];
      now.disk_read += f[2] * 512;
      now.disk_writes += f[4];
      now.disk_write += f[6] * 512;
    }
    r.disk_read_bytes = now.disk_read;
    r.disk_write_bytes = now.disk_write;
    r.disk_reads = now.disk_reads;
    r.disk_writes = now.disk_writes;
  }
  {
    std::ifstream in("/proc/net/dev");
    std::string line;
    while (std::getline(in, line)) {
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      name.erase(0, name.find_first_not_of(' '));
      if (name == "lo") continue;
      std::istringstream ls(line.substr(colon + 1));
      double f[9] = {0};
      for (double& x : f) ls >> x;
      now.net_in += f[0];
      now.net_out += f[8];
    }
    r.net_received = now.net_in;
    r.net_sent = now.net_out;
  }
  now.valid = true;
  const Previous& then = machine_;
  double dt = then.valid ? now.at - then.at : 0;
  if (then.valid && now.cpu_all > then.cpu_all) {
    r.cpu_percent = 100.0 * (now.cpu_busy - then.cpu_busy) / (now.cpu_all - then.cpu_all);
  } else if (now.cpu_all > 0) {
    r.cpu_percent = 100.0 * now.cpu_busy / now.cpu_all;
  }
  if (then.valid) {
    r.disk_read_speed = Rate(now.disk_read, then.disk_read, dt);
    r.disk_write_speed = Rate(now.disk_write, then.disk_write, dt);
    r.disk_read_iops = Rate(now.disk_reads, then.disk_reads, dt);
    r.disk_write_iops = Rate(now.disk_writes, then.disk_writes, dt);
    r.net_receive_speed = Rate(now.net_in, then.net_in, dt);
    r.net_send_speed = Rate(now.net_out, then.net_out, dt);
  }
  machine_ = now;
  return r;
}

ProcessReading HostStats::Process(int pid) {
  ProcessReading r;
  std::string dir = "/proc/" + std::to_string(pid);
  auto status = KbTable(dir + "/status");
  if (status.count("VmRSS")) r.rss_bytes = status["VmRSS"];
  if (status.count("RssShmem") || status.count("RssFile")) r.shared_bytes = status["RssShmem"] + status["RssFile"];
  auto rollup = KbTable(dir + "/smaps_rollup");
  if (rollup.count("Private_Clean")) r.uss_bytes = rollup["Private_Clean"] + rollup["Private_Dirty"];
  std::error_code ec;
  double fds = 0;
  for (auto it = std::filesystem::directory_iterator(dir + "/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    fds += 1;
  }
  if (!ec) r.num_fds = fds;
  std::ifstream in(dir + "/stat");
  std::string line;
  if (std::getline(in, line)) {
    size_t close = line.rfind(')');  // (the command name may hold spaces and parentheses)
    if (close != std::string::npos) {
      std::istringstream ls(line.substr(close + 2));
      std::string field;
      double utime = 0, stime = 0;
      for (int i = 3; i <= 15 && ls >> field; ++i) {  // fields 14 and 15: utime, stime (clock ticks)
        if (i == 14) utime = std::stod(field);
        if (i == 15) stime = std::stod(field);
      }
      double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
      double cpu = ticks > 0 ? (utime + stime) / ticks : 0;
      double at = Now();
      auto it = procs_.find(pid);
      if (it != procs_.end() && at > it->second.at && cpu >= it->second.cpu_seconds) {
        r.cpu_percent = 100.0 * (cpu - it->second.cpu_seconds) / (at - it->second.at);
      } else {
        r.cpu_percent = 0;
      }
      procs_[pid] = ProcPrevious{at, cpu};
    }
  }
  return r;
}

}  // namespace phalanx::scheduler
