// Lineage: the specs of the normal tasks this node submitted that finished on
// another node with results still only there, kept while any of their
// results is alive here, so that a result whose only copy was lost (its node
// died) can be made again by running its task once more (docs/fault-tolerance.md, "Lineage reconstruction"). Bounded: past
// `max_bytes` of specs the oldest go, and their results can no longer be
// rebuilt (Why says so).
// Not thread-safe; lives on the raylet's main loop (in the TaskManager).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/proto/phalanx.pb.h"

namespace phalanx::scheduler {

class Lineage {
 public:
  explicit Lineage(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // A task finished: keep its spec (normal tasks) or just its name (actor
  // calls, which are never run again) until its results are all freed.
  // `live`: how many of its results are in the object table now.
  void Record(rpc::TaskSpec spec, int live);
  // One result of `task_id` was freed here.
  void ReturnFreed(const std::string& task_id);
  // The spec to run again to make a lost result of `task_id`, taken out of
  // the lineage (Record puts it back when it finishes); or nullopt with
  // *why saying why it cannot be rebuilt.
  std::optional<rpc::TaskSpec> TakeForRerun(const std::string& task_id, std::string* why);

  uint64_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  uint64_t dropped() const { return dropped_total_; }

 private:
  struct Entry {
    rpc::TaskSpec spec;  // (only the name and kind for actor calls)
    uint64_t bytes = 0;
    int live = 0;  // results not freed yet
    std::list<std::string>::iterator order;
  };
  void Erase(std::unordered_map<std::string, Entry>::iterator it);
  void Remember(std::unordered_set<std::string>& set, std::deque<std::string>& order, const std::string& id);

  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  uint64_t dropped_total_ = 0;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> order_;  // oldest first
  // Tasks whose spec went for the cap (bounded memory of them), for the error.
  std::unordered_set<std::string> dropped_;
  std::deque<std::string> dropped_order_;
};

}  // namespace phalanx::scheduler
