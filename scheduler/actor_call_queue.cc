#include "scheduler/actor_call_queue.h"

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
  auto take = [&](const std::string& tid) {
    auto c = caller_of_.find(tid);
    auto& calls = by_caller_[c->second];
    if (!calls.empty() && calls.front() == tid) {
      calls.pop_front();
    } else {
      for (auto it = calls.begin(); it != calls.end(); ++it) {
        if (*it == tid) {
          calls.erase(it);
          break;
        }
      }
    }
    if (calls.empty()) by_caller_.erase(c->second);
    caller_of_.erase(c);
    ready_.erase(tid);
    --size_;
  };
  // A call cancelled while queued is no longer a task: dropped when its turn comes.
  if (unordered_) {
    while (!ready_order_.empty()) {
      std::string tid = ready_order_.front();
      ready_order_.pop_front();
      if (!caller_of_.count(tid)) continue;  // (gone already)
      take(tid);
      if (live(tid) && !go(tid)) return;
    }
    return;
  }
  std::vector<std::string> callers;
  callers.reserve(by_caller_.size());
  for (const auto& [caller, calls] : by_caller_) callers.push_back(caller);
  for (const auto& caller : callers) {
    while (true) {
      auto it = by_caller_.find(caller);
      if (it == by_caller_.end()) break;
      std::string tid = it->second.front();
      bool alive = live(tid);
      if (alive && !ready_.count(tid)) break;
      take(tid);
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
