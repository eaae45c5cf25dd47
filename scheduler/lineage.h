// Lineage: the specs of the normal tasks this node submitted that finished on
// another node with results still only there, kept while any such result is
// alive here and not yet copied here, so that a result whose only copy was
// lost (its node died) can be made again by running its task once more
// (docs/fault-tolerance.md, "Lineage reconstruction"). While a spec is kept,
// so are the references its task held to its arguments (Ray's "lineage
// refs"): a rerun finds them, or makes them again in turn. Bounded: past
// `max_bytes` of specs the oldest go, and their results can no longer be
// rebuilt (Why says so).
// Not thread-safe; lives on the raylet's main loop (in the TaskManager).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/proto/phalanx.pb.h"

namespace phalanx::scheduler {

class Lineage {
 public:
  // Lets go of the object references an entry held (its task's arguments),
  // called once the entry is gone (it may run Lineage methods again).
  using Release = std::function<void(std::vector<std::string> held)>;

  explicit Lineage(uint64_t max_bytes, Release release = nullptr)
      : max_bytes_(max_bytes), release_(std::move(release)) {}

  // A task finished: keep its spec (normal tasks) or just its name (actor
  // calls, which are never run again) while any of the results `exposed`
  // (their indexes: alive here, only on another node) stays so. `held`: the
  // object references handed over with it (released when it goes).
  void Record(rpc::TaskSpec spec, std::vector<uint32_t> exposed, std::vector<std::string> held = {});
  // Result `index` of `task_id` is safe (copied here) or not needed (freed here).
  void ReturnSafe(const std::string& task_id, uint32_t index);

  struct Rerun {
    rpc::TaskSpec spec;
    std::vector<std::string> held;  // the caller releases them once the rerun holds its own
  };
  // The spec to run again to make a lost result of `task_id`, taken out of
  // the lineage (Record puts it back when it finishes); or nullopt with
  // *why saying why it cannot be rebuilt.
  std::optional<Rerun> TakeForRerun(const std::string& task_id, std::string* why);

  // Calls fn(held id, task name) for each reference the kept specs hold.
  template <typename F>
  void ForEachHeld(F&& fn) const {
    for (const auto& [tid, e] : entries_) {
      for (const auto& id : e.held) fn(id, e.spec.function_name());
    }
  }

  uint64_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  uint64_t dropped() const { return dropped_total_; }

 private:
  struct Entry {
    rpc::TaskSpec spec;  // (only the name and kind for actor calls)
    uint64_t bytes = 0;
    std::vector<uint32_t> exposed;  // results alive here and only elsewhere
    std::vector<std::string> held;
    std::list<std::string>::iterator order;
  };
  // Removes the entry, then releases what it held.
  void Erase(std::unordered_map<std::string, Entry>::iterator it);
  void Remember(std::unordered_set<std::string>& set, std::deque<std::string>& order, const std::string& id);

  uint64_t max_bytes_;
  Release release_;
  uint64_t bytes_ = 0;
  uint64_t dropped_total_ = 0;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> order_;  // oldest first
  // Tasks whose spec went for the cap (bounded memory of them), for the error.
  std::unordered_set<std::string> dropped_;
  std::deque<std::string> dropped_order_;
};

}  // namespace phalanx::scheduler
