#include "core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace phalanx {

pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close_range(3, ~0U, 0);  // nothing of the parent's but stdin, stdout and stderr
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

Status CheckPeerUser(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::Unavailable(std::string("cannot tell who connected: ") + std::strerror(errno));
  }
  if (cred.uid == ::geteuid() || cred.uid == 0) return Status::OK();
  return Status::Unavailable("the process connecting (pid " + std::to_string(cred.pid) + ") runs as uid " +
                                  std::to_string(cred.uid) + ", not as this process's user (uid " +
                                  std::to_string(::geteuid()) + ")");
}

void SetCloseOnExec(int fd) {
  if (fd < 0) return;
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

}  // namespace phalanx
