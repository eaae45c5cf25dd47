#include "scheduler/gcs_keeper.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "core/logging.h"

namespace phalanx::scheduler {

static pid_t ReadPid(const std::string& path) {
  std::ifstream f(path);
  long pid = 0;
  if (!(f >> pid) || pid <= 1) return -1;
  return static_cast<pid_t>(pid);
}

// Alive and not a zombie (one killed whose parent has not reaped it yet is gone for us).
static bool Running(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return ::kill(pid, 0) == 0 || errno == EPERM;
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || (stat[paren + 2] != 'Z' && stat[paren + 2] != 'X');
}

bool GcsKeeper::Check() {
  if (!enabled()) return false;
  pid_t pid = ReadPid(pid_file_);
  if (Running(pid)) return false;  // alive: only unreachable, or loading its data
  auto now = std::chrono::steady_clock::now();
  if (restarts_ > 0 && now - last_start_ < std::chrono::milliseconds(min_gap_ms_)) return false;
  std::ifstream f(argv_file_);
  std::vector<std::string> argv;
  for (std::string line; std::getline(f, line);) {
    if (!line.empty()) argv.push_back(line);
  }
  if (argv.empty()) {
    PHALANX_LOG(Error) << "cannot restart redis-server: no command line in " << argv_file_;
    return false;
  }
  last_start_ = now;
  pid_t child = ::fork();
  if (child == 0) {
    if (tie_) ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // (as the first one was to the driver: dies with this raylet)
    ::close_range(3, ~0U, 0);
    ::setsid();  // (its own session: signals to the raylet's group do not reach it)
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  if (child <= 0) {
    PHALANX_LOG(Error) << "cannot restart redis-server: fork failed";
    return false;
  }
  ++restarts_;
  PHALANX_LOG(Warning) << "redis-server (pid " << pid << ") is gone: started it again (pid " << child
                       << ") with its data folder; restart " << restarts_;
  return true;
}

}  // namespace phalanx::scheduler
