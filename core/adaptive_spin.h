// AdaptiveSpin: how long a thread waiting for a reply looks for it before
// it sleeps. Spinning saves two context switches when the reply comes
// within the spin (sync tasks and actor calls ~25% faster on 2 cores) and
// wastes the CPU when it does not: on few cores that CPU is taken from the
// processes making the reply (a get of eight actor calls' results, or of a
// reduce over them). So the full spin until four waits in a row outlast
// it, then none, with the full spin tried every 16th wait and back for good
// after any reply that came within it. (Halving it after each long wait
// cost sync tasks 19%: their replies straddle the spin.) Thread-safe
// (relaxed: a lost update costs one spin).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace phalanx {

class AdaptiveSpin {
 public:
  explicit AdaptiveSpin(int full_us) : full_us_(full_us) {}

  // The spin for the next wait, in microseconds.
  int Budget() {
    if (long_in_a_row_.load(std::memory_order_relaxed) < kLongBeforeNone) return full_us_;
    return skipped_.fetch_add(1, std::memory_order_relaxed) % kProbeEvery == kProbeEvery - 1 ? full_us_ : 0;
  }
  // A wait ended after `waited`.
  void Done(std::chrono::steady_clock::duration waited) {
    if (waited <= std::chrono::microseconds(full_us_)) {
      long_in_a_row_.store(0, std::memory_order_relaxed);
    } else if (long_in_a_row_.load(std::memory_order_relaxed) < kLongBeforeNone) {
      long_in_a_row_.fetch_add(1, std::memory_order_relaxed);
    }
  }

 private:
  static constexpr int kLongBeforeNone = 4;
  static constexpr uint32_t kProbeEvery = 16;
  const int full_us_;
  std::atomic<int> long_in_a_row_{0};
  std::atomic<uint32_t> skipped_{0};
};

}  // namespace phalanx
