#include "scheduler/lineage.h"

namespace phalanx::scheduler {

namespace {
constexpr size_t kDroppedMemory = 16384;  // tasks whose spec went for the cap, remembered for the error
}

void Lineage::Record(rpc::TaskSpec spec, int live) {
  if (spec.num_returns() <= 0 || spec.kind() == rpc::TASK_ACTOR_CREATION) return;
  auto old = entries_.find(spec.task_id());
  if (old != entries_.end()) Erase(old);
  Entry e;
  std::string tid = spec.task_id();
  if (spec.kind() == rpc::TASK_NORMAL) {
    e.spec = std::move(spec);
  } else {  // an actor call: only what the error needs
    e.spec.set_task_id(spec.task_id());
    e.spec.set_kind(spec.kind());
    e.spec.set_function_name(spec.function_name());
  }
  e.bytes = e.spec.ByteSizeLong();
  e.live = live;
  e.order = order_.insert(order_.end(), tid);
  bytes_ += e.bytes;
  entries_.emplace(std::move(tid), std::move(e));
  while (bytes_ > max_bytes_ && !order_.empty()) {
    std::string oldest = order_.front();
    Erase(entries_.find(oldest));
    Remember(dropped_, dropped_order_, oldest);
    ++dropped_total_;
  }
}

void Lineage::ReturnFreed(const std::string& task_id) {
  auto it = entries_.find(task_id);
  if (it != entries_.end() && --it->second.live <= 0) Erase(it);
}

std::optional<rpc::TaskSpec> Lineage::TakeForRerun(const std::string& task_id, std::string* why) {
  auto it = entries_.find(task_id);
  if (it == entries_.end()) {
    *why = dropped_.count(task_id)
               ? "the spec of the task that made it was dropped: the lineage kept here passed its cap of " +
                     std::to_string(max_bytes_ >> 20) + " MiB (--lineage-max-bytes)"
               : "no spec of the task that made it is kept on this node (it was made by an actor call that "
                 "returned straight to its caller, by another node's task, or its lineage went with its results)";
    return std::nullopt;
  }
  const rpc::TaskSpec& spec = it->second.spec;
  if (spec.kind() != rpc::TASK_NORMAL) {
    *why = "it is the result of actor method " + spec.function_name() +
           ": actor calls are not run again to rebuild what they returned";
    return std::nullopt;
  }
  if (spec.attempt() >= spec.max_retries()) {
    *why = "its task " + spec.function_name() + " has no retries left (max_retries=" +
           std::to_string(spec.max_retries()) + ")";
    return std::nullopt;
  }
  rpc::TaskSpec rerun = spec;
  Erase(it);
  return rerun;
}

void Lineage::Erase(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  order_.erase(it->second.order);
  entries_.erase(it);
}

void Lineage::Remember(std::unordered_set<std::string>& set, std::deque<std::string>& order, const std::string& id) {
  if (set.insert(id).second) order.push_back(id);
  while (order.size() > kDroppedMemory) {
    set.erase(order.front());
    order.pop_front();
  }
}

}  // namespace phalanx::scheduler
