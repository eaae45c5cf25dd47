// HeartbeatThread: the node's liveness beat, on a thread of its own with its
// own blocking connection to redis-server, so that a busy main loop (a long
// copy, 2 cores shared by 8 raylets) never makes a live node look dead.
// Every `interval_ms` it writes "seq:late_ms" to the GCS hash "heartbeats"
// (field: the node id in hex): seq counts beats, late_ms is how late its own
// timer fired at worst over the last minute (what the machine's load costs
// it), which readers add to their timeout (scheduler/cluster_view.h).
//
// The beat says the raylet works, not only that a thread runs: when the main
// loop has not called MainLoopAlive() for `stall_ms`, the thread stops
// beating (and logs once), so a wedged raylet is declared dead like a killed
// one. It reconnects by itself after redis-server comes back. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/tls.h"
#include "gcs/redis_client.h"

namespace phalanx::scheduler {

struct HeartbeatOptions {
  std::vector<RedisEndpoint> endpoints;  // the GCS's primary first, then replicas that may be promoted
  std::string password;
  std::shared_ptr<const TlsContext> tls;
  std::string node_id;      // binary
  int interval_ms = 1000;
  int64_t stall_ms = 60000;  // the main loop silent this long: stop beating
};

class HeartbeatThread {
 public:
  explicit HeartbeatThread(HeartbeatOptions options);
  ~HeartbeatThread();
  void Start();
  // Stops beating and joins the thread. Idempotent.
  void Stop();
  // The main loop is turning (call it from there at least every stall_ms).
  void MainLoopAlive();
  uint64_t beats() const { return beats_.load(); }
  int64_t max_late_ms() const { return max_late_ms_.load(); }

 private:
  void Run();

  HeartbeatOptions options_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int64_t> main_alive_ms_{0};  // steady ms of the main loop's last sign
  std::atomic<uint64_t> beats_{0};
  std::atomic<int64_t> max_late_ms_{0};
};

}  // namespace phalanx::scheduler
