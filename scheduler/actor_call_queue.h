// ActorCallQueue: an actor's method calls that this raylet has not sent to
// its worker yet, and the order they may go in. As Ray orders an actor's
// calls: the calls of one caller go in the order it made them, so a call
// whose ref arguments are not ready holds back that caller's later calls,
// never another caller's. An actor that runs its calls concurrently (async,
// or threaded: `unordered`) takes each call as soon as its own arguments are
// ready, as Ray's out-of-order actors do. Not thread-safe; the raylet's loop.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace phalanx::scheduler {

class ActorCallQueue {
 public:
  void set_unordered(bool unordered);
  bool unordered() const { return unordered_; }

  // A call made by `caller` (its client id), its arguments maybe not ready yet.
  void PushBack(const std::string& caller, const std::string& task_id);
  // Back in front of the caller's other calls, ready: a call that a dead
  // worker had. Push the oldest last, so that they keep their order.
  void PushFront(const std::string& caller, const std::string& task_id);
  // Its ref arguments are ready.
  void MarkReady(const std::string& task_id);

  // Hands `go` each call that may go now, in order, until it returns false.
  // A call for which `live` is false (cancelled while queued) is dropped.
  void Drain(const std::function<bool(const std::string&)>& live, const std::function<bool(const std::string&)>& go);
  // Takes every queued call (to fail them all).
  std::vector<std::string> TakeAll();

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

 private:
  bool unordered_ = false;
  std::unordered_map<std::string, std::deque<std::string>> by_caller_;  // caller -> its calls, oldest first
  std::unordered_set<std::string> ready_;
  // Unordered: calls whose arguments are ready, in the order they became so (queued calls only).
  std::deque<std::string> ready_order_;
  std::unordered_map<std::string, std::string> caller_of_;  // queued call -> its caller
  size_t size_ = 0;
};

}  // namespace phalanx::scheduler
