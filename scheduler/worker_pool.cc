#include "scheduler/worker_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"

extern char** environ;

namespace phalanx::scheduler {

WorkerPool::WorkerPool(boost::asio::io_context& io, WorkerPoolOptions options, WorkerDeaths* deaths)
    : io_(io), options_(std::move(options)), sigchld_(io, SIGCHLD), deaths_(deaths) {
  WatchChildren();
}

WorkerPool::~WorkerPool() { KillAll(std::chrono::milliseconds(500)); }

void WorkerPool::WatchChildren() {
  sigchld_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) OnChildExit(pid, status);
    WatchChildren();
  });
}

static std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  return "ended";
}

void WorkerPool::OnChildExit(pid_t pid, int status) {
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return;
  Worker* w = it->second;
  MarkDead(w, "worker process " + std::to_string(pid) + " " + DescribeExit(status));
}

size_t WorkerPool::num_starting(const WorkerKind& kind) const {
  size_t n = 0;
  for (const auto& [t, w] : starting_) n += w->kind == kind ? 1 : 0;
  return n;
}

Status WorkerPool::CanStart(rpc::Language language) const {
  if (language == rpc::LANGUAGE_PYTHON && !options_.worker_command.empty()) return Status::OK();
  if (language == rpc::LANGUAGE_CPP && !options_.cpp_worker_command.empty()) return Status::OK();
  if (language == rpc::LANGUAGE_CPP) {
    return Status::NotFound("this node runs no C++ workers: start its raylet with --cpp-worker-command "
                            "(`phalanx start --cpp-worker-libs LIB.so`, or a C++ program's own embedded cluster)");
  }
  return Status::NotFound("this node runs no workers of language " + std::to_string(language));
}

namespace {
// The thread-count variables of the math libraries a worker may load.
constexpr const char* kThreadVars[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                       "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"};
}  // namespace

bool WorkerPool::StartWorker(const WorkerKind& kind) {
  if (closed_) return false;
  rpc::Language language = kind.language;
  rpc::RuntimeEnv env;
  if (!kind.env.empty() && (!env.ParseFromString(kind.env) || !CheckRuntimeEnv(env).ok())) {
    PHALANX_LOG(Error) << "cannot start a worker: a malformed runtime environment";  // (checked with the task)
    return false;
  }
  if (!CanStart(language).ok()) {
    PHALANX_LOG(Error) << "cannot start a worker: " << CanStart(language).message();
    return false;
  }
  std::string token = ToHex(RandomBytes(8));
  // The environment's variables replace the raylet's of the same name.
  std::set<std::string> replaced;
  for (const auto& v : env.env_vars()) replaced.insert(v.name());
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PHALANX_", 8) == 0) continue;
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr && replaced.count(std::string(*e, eq - *e))) continue;
    env_strings.emplace_back(*e);
  }
  // Math libraries (OpenMP, OpenBLAS, MKL, numexpr, Accelerate) start a
  // thread per core in every worker unless told otherwise: on a node running
  // a worker per CPU that is cores x cores threads. Unless the user set a
  // limit, a worker starts with one thread, and the worker resizes it to
  // each task's CPUs (PHALANX_THREADS=managed; python/phalanx/_private/worker.py).
  bool managed = true;
  for (const char* var : kThreadVars) {
    if (std::getenv(var) != nullptr || replaced.count(var)) managed = false;
  }
  if (managed) {
    for (const char* var : kThreadVars) env_strings.push_back(std::string(var) + "=1");
    env_strings.push_back("PHALANX_THREADS=managed");
  }
  env_strings.push_back("PHALANX_RAYLET_SOCKET=" + options_.raylet_socket);
  env_strings.push_back("PHALANX_WORKER_TOKEN=" + token);
  env_strings.push_back("PHALANX_SESSION_DIR=" + options_.session_dir);
  for (const auto& [k, v] : options_.extra_env) env_strings.push_back(k + "=" + v);
  for (const auto& v : env.env_vars()) env_strings.push_back(v.name() + "=" + v.value());
  if (!kind.env.empty()) env_strings.push_back("PHALANX_RUNTIME_ENV=" + ToHex(kind.env));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string log = options_.log_dir + "/worker-" + token + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // Nothing of the raylet's but these three (its sockets and GCS connections
  // are close-on-exec too; this also covers any a library opened without).
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::string cmd =
      "exec " + (language == rpc::LANGUAGE_CPP ? options_.cpp_worker_command : options_.worker_command);
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, const_cast<char* const*>(argv), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    PHALANX_LOG(Error) << "cannot start a worker (" << cmd << "): " << std::strerror(rc);
    return false;
  }
  auto w = std::make_unique<Worker>();
  w->token = token;
  w->kind = kind;
  w->pid = pid;
  starting_[token] = w.get();
  by_pid_[pid] = w.get();
  by_token_[token] = std::move(w);
  PHALANX_LOG(Debug) << "started worker pid " << pid << " log " << log;
  return true;
}

Worker* WorkerPool::Register(const std::string& token, int pid, std::shared_ptr<FramedConnection> conn) {
  auto it = starting_.find(token);
  if (it == starting_.end()) return nullptr;
  Worker* w = it->second;
  starting_.erase(it);
  if (w->pid != pid) {  // /bin/sh exec'd into the worker, so the pids match; note it if not
    PHALANX_LOG(Warning) << "worker registered with pid " << pid << ", started as " << w->pid;
  }
  w->conn = std::move(conn);
  return w;
}

Worker* WorkerPool::Find(const std::string& token) {
  auto it = by_token_.find(token);
  return it == by_token_.end() || it->second->dead ? nullptr : it->second.get();
}

Worker* WorkerPool::PopIdleIf(const WorkerKind& kind, const std::function<bool(const Worker&)>& usable) {
  // Most recently used first: warm caches.
  for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
    Worker* w = *it;
    bool gone = w->dead || (w->conn && w->conn->closed());
    if (w->kind != kind || (!gone && usable && !usable(*w))) continue;
    idle_.erase(std::next(it).base());
    if (!gone) return w;
    return PopIdleIf(kind, usable);  // dropped a dead one; look again
  }
  return nullptr;
}

bool WorkerPool::StopIdleIf(const std::function<bool(const Worker&)>& which) {
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {  // oldest first
    Worker* w = *it;
    if (w->dead || !which(*w)) continue;
    idle_.erase(it);
    w->stopped = true;
    ++num_stopped_;
    if (w->conn) w->conn->Close();
    ::kill(w->pid, SIGTERM);
    return true;
  }
  return false;
}

void WorkerPool::PushIdle(Worker* w) {
  if (w->dead || w->exiting) return;
  w->idle_since = std::chrono::steady_clock::now();
  idle_.push_back(w);
}

void WorkerPool::MarkDead(Worker* w, const std::string& why) {
  if (w->dead) return;
  w->dead = true;
  if (w->stopped) --num_stopped_;
  idle_.erase(std::remove(idle_.begin(), idle_.end(), w), idle_.end());
  starting_.erase(w->token);
  if (w->conn) w->conn->Close();
  if (::kill(w->pid, 0) == 0) ::kill(w->pid, SIGKILL);  // a worker that lost its socket must not linger
  if (deaths_ != nullptr) deaths_->OnWorkerDied(w, why);
  // Keep the record until the process is reaped, then drop it.
  by_pid_.erase(w->pid);
  std::string token = w->token;
  boost::asio::post(io_, [this, token] { by_token_.erase(token); });
}

void WorkerPool::TrimIdle(size_t keep, std::chrono::milliseconds idle_for,
                          const std::function<bool(const Worker&)>& spare) {
  auto now = std::chrono::steady_clock::now();
  size_t idle = idle_.size();
  for (auto it = idle_.begin(); it != idle_.end() && idle > keep;) {  // oldest first
    Worker* w = *it;
    if (now - w->idle_since <= idle_for) break;
    if (spare && spare(*w)) {
      ++it;
      continue;
    }
    it = idle_.erase(it);
    --idle;
    if (w->conn) w->conn->Close();
    ::kill(w->pid, SIGTERM);
  }
}

void WorkerPool::KillAll(std::chrono::milliseconds grace) {
  closed_ = true;
  std::vector<pid_t> pids;
  for (auto& [token, w] : by_token_) {
    if (w->dead) continue;
    ::kill(w->pid, SIGTERM);
    pids.push_back(w->pid);
  }
  auto until = std::chrono::steady_clock::now() + grace;
  for (pid_t pid : pids) {
    while (::waitpid(pid, nullptr, WNOHANG) == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (::kill(pid, 0) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  by_pid_.clear();
}

std::vector<Worker*> WorkerPool::All() const {
  std::vector<Worker*> out;
  for (const auto& [t, w] : by_token_) out.push_back(w.get());
  return out;
}

}  // namespace phalanx::scheduler
