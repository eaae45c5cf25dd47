// AdaptiveSpin: how long a thread waiting for a reply looks for it before
// it sleeps. Spinning saves two context switches when the reply comes
// within the budget (sync tasks and actor calls ~25% faster on 2 cores) and
// wastes the CPU when it does not: on few cores that CPU is taken from the
// processes making the reply (a get of eight actor calls' results, or of a
// reduce over them). So the full budget while replies come within it,
// halved after each wait that outlasted it, down to none, tried in full
// again every 16th wait, and full again after any reply within it. Thread-safe (relaxed: a lost update costs a spin).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace phalanx {

class AdaptiveSpin {
 public:
  explicit AdaptiveSpin(int full_us) : full_us_(full_us), budget_us_(full_us) {}

  // The spin for the next wait, in microseconds.
  int Budget() {
    int b = budget_us_.load(std::memory_order_relaxed);
    if (b == 0 && skipped_.fetch_add(1, std::memory_order_relaxed) % kProbeEvery == kProbeEvery - 1) return full_us_;
    return b;
  }
  // A wait given `budget_us` ended after `waited`: within the full spin, the
  // full spin stays (or comes back); past it, the spin is halved.
  void Done(std::chrono::steady_clock::duration waited, int budget_us) {
    if (waited <= std::chrono::microseconds(full_us_)) {
      budget_us_.store(full_us_, std::memory_order_relaxed);
      return;
    }
    int half = std::min(budget_us, budget_us_.load(std::memory_order_relaxed)) / 2;  // (a failed probe: stays none)
    budget_us_.store(half < kFloorUs ? 0 : half, std::memory_order_relaxed);
  }
  int full_us() const { return full_us_; }

 private:
  static constexpr uint32_t kProbeEvery = 16;
  static constexpr int kFloorUs = 10;
  const int full_us_;
  std::atomic<int> budget_us_;
  std::atomic<uint32_t> skipped_{0};
};

}  // namespace phalanx
