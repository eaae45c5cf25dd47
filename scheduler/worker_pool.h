// WorkerPool: the node's worker processes. It starts workers of each
// language (Python, C++) with the command the raylet was configured with --
// nothing a client or a peer sends decides what runs; a task's runtime
// environment adds its env_vars and PHALANX_RUNTIME_ENV (the worker sets the
// rest up itself), and workers of one environment serve only its tasks --
// matches each one's registration to the
// process it started (by a token passed in the environment), keeps the idle
// ones, notices deaths (SIGCHLD and socket close, whichever comes first) and
// reaps them. Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>

#include "core/framed_connection.h"
#include "core/proto/phalanx.pb.h"
#include "scheduler/resources.h"
#include "scheduler/task_table.h"

namespace phalanx::scheduler {

struct Worker {
  std::string token;
  pid_t pid = 0;
  std::shared_ptr<FramedConnection> conn;  // null until it registers
  std::deque<std::string> inflight;        // task ids pushed to it, oldest first
  int long_inflight = 0;                   // of those, how many are not known to be short
  ResourceSet leased;                      // what its current lease holds
  std::vector<int> gpu_ids;                // GPUs of that lease (or of its actor)
  bool has_lease = false;
  uint64_t lease_seq = 0;                  // counts its leases: a get that blocked in an earlier one is stale
  bool blocked = false;                    // waiting in a get: lease lent back to the node
  bool dead = false;
  bool exiting = false;                    // said it exits after its task: no new work
  std::string actor_id;                    // non-empty: dedicated to this actor for its life
  std::string client_id;                   // its connection's, once it registered
  WorkerKind kind;                         // its language (which configured command started it) and environment
  bool stopped = false;                    // stopped to make room (StopIdleIf); not gone yet
  // Store objects pushed to it as arguments, pinned until the worker releases
  // its views of them (or dies).
  std::unordered_map<std::string, int64_t> pins;
  std::chrono::steady_clock::time_point idle_since;
};

struct WorkerPoolOptions {
  std::string worker_command;      // Python workers: run with /bin/sh -c "exec ..."
  std::string cpp_worker_command;  // C++ workers; empty: this node runs no C++ tasks
  std::string raylet_socket;
  std::string session_dir;
  std::string log_dir;
  std::map<std::string, std::string> extra_env;
};

class WorkerPool final : public WorkerPoolView {
 public:
  // `deaths` is told of each worker that dies (owned by the caller, outliving this).
  WorkerPool(boost::asio::io_context& io, WorkerPoolOptions options, WorkerDeaths* deaths);
  ~WorkerPool();

  // Starts one worker process of `kind`. Returns false (and logs) if it cannot.
  bool StartWorker(const WorkerKind& kind = WorkerKind()) override;
  // Whether this node was configured to start workers of `language`; if
  // not, NotFound saying how to configure it.
  Status CanStart(rpc::Language language) const override;
  // A process started here registered with `token`; nullptr if unknown.
  Worker* Register(const std::string& token, int pid, std::shared_ptr<FramedConnection> conn);
  // The live worker started with `token`, or nullptr.
  Worker* Find(const std::string& token);
  // An idle registered worker of `kind`, or nullptr.
  Worker* PopIdle(const WorkerKind& kind = WorkerKind()) override { return PopIdleIf(kind, nullptr); }
  Worker* PopIdleIf(const WorkerKind& kind, const std::function<bool(const Worker&)>& usable) override;
  bool StopIdleIf(const std::function<bool(const Worker&)>& which) override;
  void PushIdle(Worker* w) override;
  // The worker is gone: called once per worker, from either signal.
  void MarkDead(Worker* w, const std::string& why);
  // Stops idle workers beyond `keep` that have idled longer than `idle_for`,
  // except those `spare` says to keep (they own actors that die with them).
  void TrimIdle(size_t keep, std::chrono::milliseconds idle_for, const std::function<bool(const Worker&)>& spare);
  // Terminates every worker (SIGTERM, then SIGKILL after `grace`).
  void KillAll(std::chrono::milliseconds grace);

  size_t num_starting() const { return starting_.size(); }
  size_t num_starting(const WorkerKind& kind) const override;
  size_t num_registered() const { return by_token_.size() - starting_.size(); }
  size_t num_idle() const { return idle_.size(); }
  size_t size() const override { return by_token_.size() - num_stopped_; }
  std::vector<Worker*> All() const override;

 private:
  void WatchChildren();
  void OnChildExit(pid_t pid, int status);

  boost::asio::io_context& io_;
  WorkerPoolOptions options_;
  boost::asio::signal_set sigchld_;
  std::unordered_map<std::string, std::unique_ptr<Worker>> by_token_;
  std::unordered_map<pid_t, Worker*> by_pid_;
  std::unordered_map<std::string, Worker*> starting_;
  std::deque<Worker*> idle_;
  WorkerDeaths* deaths_;
  size_t num_stopped_ = 0;  // workers stopped by StopIdleIf, not gone yet
  bool closed_ = false;  // after KillAll: start nothing more
};

}  // namespace phalanx::scheduler
