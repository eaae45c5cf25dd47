#include "scheduler/heartbeat.h"

#include <algorithm>
#include <deque>

#include "core/logging.h"
#include "gcs/gcs_client.h"

namespace phalanx::scheduler {

using Clock = std::chrono::steady_clock;

static int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

HeartbeatThread::HeartbeatThread(HeartbeatOptions options) : options_(std::move(options)) {
  main_alive_ms_ = SteadyMs();
}

HeartbeatThread::~HeartbeatThread() { Stop(); }

void HeartbeatThread::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void HeartbeatThread::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeartbeatThread::MainLoopAlive() { main_alive_ms_ = SteadyMs(); }

void HeartbeatThread::Run() {
  std::unique_ptr<RedisConnection> conn;
  std::deque<std::pair<int64_t, int64_t>> lateness;  // (when, how late) over the last minute
  auto next = Clock::now();
  bool stalled_logged = false;
  uint64_t seq = 0;
  while (true) {
    next += std::chrono::milliseconds(options_.interval_ms);
    {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_until(l, next, [this] { return stop_; })) return;
    }
    auto woke = Clock::now();
    int64_t late = std::chrono::duration_cast<std::chrono::milliseconds>(woke - next).count();
    if (woke - next > std::chrono::milliseconds(options_.interval_ms)) next = woke;  // (no burst of catch-up beats)
    int64_t now = SteadyMs();
    lateness.emplace_back(now, std::max<int64_t>(late, 0));
    while (!lateness.empty() && lateness.front().first < now - 60000) lateness.pop_front();
    int64_t worst = 0;
    for (const auto& [t, v] : lateness) worst = std::max(worst, v);
    max_late_ms_ = worst;

    if (now - main_alive_ms_.load() > options_.stall_ms) {
      if (!stalled_logged) {
        PHALANX_LOG(Error) << "the raylet's main loop has not turned for " << (now - main_alive_ms_.load()) / 1000
                           << " s: no more heartbeats (the cluster will declare this node dead)";
        stalled_logged = true;
      }
      continue;
    }
    if (stalled_logged) {
      PHALANX_LOG(Warning) << "the raylet's main loop turns again: heartbeating";
      stalled_logged = false;
    }
    if (!conn) {
      auto c = OpenPrimary(options_.endpoints, options_.password, options_.tls, std::max(200, options_.interval_ms));
      if (!c.ok()) continue;  // (redis-server away: the main loop's client says so; try next beat)
      conn = std::move(c.value().first);
    }
    auto r = conn->Command(GcsClient::HeartbeatCommand(options_.node_id,
                                                      std::to_string(++seq) + ":" + std::to_string(worst)));
    if (!r.ok() || r.value().type == RedisReply::kError) {
      conn.reset();
      continue;
    }
    beats_.fetch_add(1);
  }
}

}  // namespace phalanx::scheduler
