#include "core/process.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

void NameThisThread(const char* name) {
  (void)::pthread_setname_np(::pthread_self(), std::string(name).substr(0, 15).c_str());
}

Result<int> ConnectTcpWithin(const std::string& host, int port, int64_t timeout_ms) {
  std::string address = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (gai != 0) return Status::Unavailable("cannot connect to " + address + ": " + ::gai_strerror(gai));
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(timeout_ms, 0)));
      int err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (r == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return Status::Unavailable("cannot connect to " + address + ": " + why);
  return fd;
}

Status WriteFileWithMode(const std::string& path, const std::string& bytes, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::Unavailable("cannot write " + path + ": " + std::strerror(errno));
  ::fchmod(fd, mode);  // (an existing file keeps its mode through open)
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n <= 0) {
      ::close(fd);
      return Status::Unavailable("cannot write " + path + ": " + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  return Status::OK();
}

}  // namespace phalanx
