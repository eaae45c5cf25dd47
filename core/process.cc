#include "core/process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

namespace phalanx {

pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (FILE* f = std::fopen(log_path.c_str(), "a")) {
      ::dup2(fileno(f), 1);
      ::dup2(fileno(f), 2);
    }
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

void StopProcess(pid_t pid, int grace_ms) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  for (int waited = 0; waited < grace_ms; waited += 10) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace phalanx
