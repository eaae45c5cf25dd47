#include "scheduler/lineage.h"

#include <algorithm>

namespace phalanx::scheduler {

namespace {
constexpr size_t kDroppedMemory = 16384;  // tasks whose spec went for the cap, remembered for the error
}

void Lineage::Record(rpc::TaskSpec spec, std::vector<uint32_t> exposed, std::vector<std::string> held) {
  if (spec.num_returns() <= 0 || spec.kind() == rpc::TASK_ACTOR_CREATION || exposed.empty()) {
    if (release_ && !held.empty()) release_(std::move(held));
    return;
  }
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
  e.exposed = std::move(exposed);
  e.held = std::move(held);
  e.order = order_.insert(order_.end(), tid);
  bytes_ += e.bytes;
  entries_.emplace(std::move(tid), std::move(e));
  while (bytes_ > max_bytes_ && !order_.empty()) {
    std::string oldest = order_.front();
    Remember(dropped_, dropped_order_, oldest);
    ++dropped_total_;
    Erase(entries_.find(oldest));
  }
}

void Lineage::ReturnSafe(const std::string& task_id, uint32_t index) {
  auto it = entries_.find(task_id);
  if (it == entries_.end()) return;
  auto& ex = it->second.exposed;
  auto pos = std::find(ex.begin(), ex.end(), index);
  if (pos == ex.end()) return;
  ex.erase(pos);
  if (ex.empty()) Erase(it);
}

std::optional<Lineage::Rerun> Lineage::TakeForRerun(const std::string& task_id, std::string* why) {
  auto it = entries_.find(task_id);
  if (it == entries_.end()) {
    *why = dropped_.count(task_id)
               ? "the spec of the task that made it was dropped: the lineage kept here passed its cap of " +
                     std::to_string(max_bytes_ >> 20) + " MiB (--lineage-max-bytes)"
               : "no spec of the task that made it is kept on this node (it was made by an actor call that "
                 "returned straight to its caller, or by another node's task)";
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
  Rerun rerun{std::move(it->second.spec), std::move(it->second.held)};
  it->second.held.clear();
  Erase(it);
  return rerun;
}

void Lineage::Erase(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  order_.erase(it->second.order);
  std::vector<std::string> held = std::move(it->second.held);
  entries_.erase(it);
  if (release_ && !held.empty()) release_(std::move(held));  // (last: it may free objects, and come back here)
}

void Lineage::Remember(std::unordered_set<std::string>& set, std::deque<std::string>& order, const std::string& id) {
  if (set.insert(id).second) order.push_back(id);
  while (order.size() > kDroppedMemory) {
    set.erase(order.front());
    order.pop_front();
  }
}

}  // namespace phalanx::scheduler
