#include "scheduler/actor_call_queue.h"

#include <algorithm>

namespace phalanx::scheduler {

void ActorCallQueue::set_unordered(bool unordered) {
  if (unordered == unordered_) return;
  unordered_ = unordered;
  ready_order_.clear();
  if (!unordered_) return;
  for (const auto& [caller, calls] : by_caller_) {
    for (const auto& tid : calls) {
      if (ready_.count(tid)) ready_order_.push_back(tid);
    }
  }
}

void ActorCallQueue::PushBack(const std::string& caller, const std::string& task_id) {
  if (!caller_of_.emplace(task_id, caller).second) return;
  by_caller_[caller].push_back(task_id);
  ++size_;
}

void ActorCallQueue::PushFront(const std::string& caller, const std::string& task_id) {
  if (!caller_of_.emplace(task_id, caller).second) return;
  by_caller_[caller].push_front(task_id);
  ++size_;
  MarkReady(task_id);
}

void ActorCallQueue::MarkReady(const std::string& task_id) {
  if (!caller_of_.count(task_id) || !ready_.insert(task_id).second) return;
  if (unordered_) ready_order_.push_back(task_id);
}

void ActorCallQueue::Drain(const std::function<bool(const std::string&)>& live,
                           const std::function<bool(const std::string&)>& go) {
  // A call cancelled while queued is no longer a task: dropped when its turn comes.
  if (unordered_) {
    while (!ready_order_.empty()) {
      std::string tid = std::move(ready_order_.front());
      ready_order_.pop_front();
      auto c = caller_of_.find(tid);
      if (c == caller_of_.end()) continue;  // (gone already)
      auto calls = by_caller_.find(c->second);
      calls->second.erase(std::find(calls->second.begin(), calls->second.end(), tid));
      if (calls->second.empty()) by_caller_.erase(calls);
      caller_of_.erase(c);
      ready_.erase(tid);
      --size_;
      if (live(tid) && !go(tid)) return;
    }
    return;
  }
  // The callers whose first call may go (or is gone); `go` may change the
  // queue (a forward that fails puts calls back), so each is looked up again.
  std::vector<std::string> callers;
  for (const auto& [caller, calls] : by_caller_) {
    if (calls.empty() || ready_.count(calls.front()) || !live(calls.front())) callers.push_back(caller);
  }
  for (const auto& caller : callers) {
    while (true) {
      auto it = by_caller_.find(caller);
      if (it == by_caller_.end()) break;
      if (it->second.empty()) {
        by_caller_.erase(it);
        break;
      }
      bool alive = live(it->second.front());
      if (alive && !ready_.count(it->second.front())) break;
      std::string tid = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) by_caller_.erase(it);
      caller_of_.erase(tid);
      ready_.erase(tid);
      --size_;
      if (alive && !go(tid)) return;
    }
  }
}

std::vector<std::string> ActorCallQueue::TakeAll() {
  std::vector<std::string> all;
  all.reserve(size_);
  for (auto& [caller, calls] : by_caller_) all.insert(all.end(), calls.begin(), calls.end());
  by_caller_.clear();
  ready_.clear();
  ready_order_.clear();
  caller_of_.clear();
  size_ = 0;
  return all;
}

}  // namespace phalanx::scheduler
