// SpareBodies: message bodies a static group's channel has handed out and
// got back, kept to read later messages into: a large message then lands
// in memory that is already the process's (no allocation, no page faults,
// no clearing). Shared with what outlives a call (a compiled graph's
// received value gives its body back when Python lets go of it). Bounded:
// at most kMax bodies and kMaxBytes in all; small bodies are not kept (they
// cost nothing to make). Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace phalanx {

class SpareBodies {
 public:
  static constexpr size_t kMax = 16;
  static constexpr size_t kMaxBytes = 64 << 20;
  static constexpr size_t kAtLeast = 64 << 10;

  void Give(std::string body) {
    if (body.capacity() < kAtLeast) return;
    std::lock_guard<std::mutex> l(mu_);
    if (bodies_.size() >= kMax || bytes_ + body.capacity() > kMaxBytes) return;
    bytes_ += body.capacity();
    bodies_.push_back(std::move(body));
  }
  // A spare to read a body of `size` bytes into (its old bytes not cleared),
  // or an empty string: none kept, or `size` too small to be worth one.
  std::string Take(size_t size) {
    if (size < kAtLeast) return std::string();
    std::lock_guard<std::mutex> l(mu_);
    if (bodies_.empty()) return std::string();
    std::string b = std::move(bodies_.back());
    bodies_.pop_back();
    bytes_ -= b.capacity();
    return b;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> bodies_;
  size_t bytes_ = 0;
};

}  // namespace phalanx
