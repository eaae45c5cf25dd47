// Helpers shared by the C++ tests: free ports, temporary folders, and a real
// redis-server process started on a free port and stopped at destruction.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <hiredis/hiredis.h>

#include "core/process.h"

namespace phalanx::testing {

inline int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline std::string TempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  return p ? std::string(p) : std::string();
}

inline pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) { return SpawnProcess(argv, log); }
inline void Stop(pid_t pid) { StopProcess(pid); }

// The token the tests' raylets and redis-servers share (PHALANX_CLUSTER_TOKEN).
inline constexpr char kClusterToken[] = "phalanx-test-token";

class RedisServer {
 public:
  // `password`: redis-server's --requirepass (a cluster token), or none.
  // `aof`: every write fsynced to an append-only file in its folder before
  // the reply (so Restart() finds all of it).
  explicit RedisServer(const std::string& password = "", bool aof = false)
      : port_(FreePort()), dir_(TempDir("phalanx-redis")) {
    argv_ = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save",
             "", "--appendonly", aof ? "yes" : "no", "--appendfsync", "always", "--dir", dir_};
    if (!password.empty()) {
      argv_.push_back("--requirepass");
      argv_.push_back(password);
    }
    Start();
  }
  // Starts it again (same port, same folder) after Kill or KillHard.
  void Start() {
    pid_ = Spawn(argv_, dir_ + "/redis.log");
    for (int i = 0; i < 500; ++i) {
      redisContext* c = redisConnect("127.0.0.1", port_);
      bool ok = c != nullptr && !c->err;
      if (c) redisFree(c);
      if (ok) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~RedisServer() {
    Kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Kill() {
    Stop(pid_);
    pid_ = 0;
  }
  // SIGKILL, as a crash.
  void KillHard() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = 0;
  }
  int port() const { return port_; }

 private:
  std::vector<std::string> argv_;
  int port_;
  std::string dir_;
  pid_t pid_ = 0;
};

}  // namespace phalanx::testing
