// RefCounter: a worker process's side of reference counting, and the values
// it may answer a get with itself. It counts the process's ObjectRefs per id
// and records the ids whose count crossed zero since the last drain; the
// RayletChannel drains those (UPDATE_REFS) and the pins let go of
// (RELEASE_OBJECTS) into its batch before every message it writes, so the
// raylet always learns of a hold before anything that could depend on it.
//
// It also keeps what a get needs no round trip for: small values this
// process put or got while it holds a ref to them, the store objects it
// holds and has mapped (one raylet pin each, shared by the process's views),
// and the return ids of direct actor calls whose results have not come yet
// (a get of those waits here, worker/direct_caller.h).
// Thread-safe; it never calls out while holding its lock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/adaptive_spin.h"
#include "core/blocking_connection.h"
#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx {

// What the RayletChannel writes before each batch of messages.
class PendingChanges {
 public:
  virtual ~PendingChanges() = default;
  // Appends the frames of the changes recorded since the last drain.
  virtual void DrainInto(std::string* out) = 0;
};

// Told when a wait for direct results goes to sleep and when that sleep ends (a worker
// lends its task's CPUs meanwhile); called without RefCounter's lock.
class DirectWaitObserver {
 public:
  virtual ~DirectWaitObserver() = default;
  virtual void Sleeping() = 0;
  virtual void Awake() = 0;
};

class RefCounter : public PendingChanges {
 public:
  // What a change asks of the channel: nothing, a flush soon (the first
  // change since the last drain), or one now (a batch is full).
  enum class Flush { kNone, kSoon, kNow };
  using InterruptCheck = std::function<Status()>;

  Flush Add(const std::string& id);
  void Adopt(const std::string& id);  // the raylet already counts this hold
  Flush Remove(const std::string& id);
  int64_t Count(const std::string& id);
  // One view of a store value a get returned is over.
  Flush Release(const std::string& id);
  // A small value this process put and holds: gets of it are answered here.
  void CacheValue(const std::string& id, const std::string& data);

  // Get: fills the entries of `out` (one per id) this process can answer
  // itself (a view more of each mapped object) and adds the others to `ask`,
  // their positions to `asked`.
  void AnswerLocally(const std::vector<std::string>& ids, std::vector<rpc::ObjectValue>* out,
                     rpc::GetObjects* ask, std::vector<size_t>* asked);
  // The raylet's answer for those: kept when this process holds a ref, then
  // moved into `out`.
  void TakeAnswers(rpc::GetObjectsReply* reply, const std::vector<size_t>& asked, std::vector<rpc::ObjectValue>* out);
  // Wait: those of `ids` that are here already.
  std::vector<std::string> ReadyHere(const std::vector<std::string>& ids);

  // Direct actor calls: `ids` are on the way; their results came (small
  // values are kept while a ref is held) or will not come this way.
  void ExpectDirect(const std::vector<std::string>& ids);
  // True when one of the results is awaited by the raylet (RayletAwaits):
  // the caller sends them to it at once rather than in the next batch.
  bool DirectResultsCame(std::vector<rpc::TaskDone>* done, uint64_t inline_limit);
  void ForgetDirect(const std::vector<std::string>& ids);
  // Those of `ids` still on the way are inputs of something the raylet runs
  // as soon as they come (a reduce).
  void RayletAwaits(const std::vector<std::string>& ids);
  // Waits until none of `ids` is a direct result on the way, the deadline
  // passes or `interrupt` says to stop; short results are looked for before sleeping.
  // `until_failure`: or until one of `ids` here is its task's error (a get of several ends there).
  // `observer` (if any) hears when the wait goes to sleep and wakes.
  Status AwaitDirect(const std::vector<std::string>& ids, Deadline deadline, const InterruptCheck& interrupt,
                     bool until_failure = false, DirectWaitObserver* observer = nullptr);

  // The raylet asked for the pins of mappings nothing reads now (UNMAP_IDLE):
  // they go with the next drain.
  void UnmapIdleSoon() { unmap_idle_ = true; }
  void DrainInto(std::string* out) override;
  // Later changes are not recorded; waits in AwaitDirect end.
  void Stop();

 private:
  bool DirectPendingLocked(const std::vector<std::string>& ids, bool until_failure = false) const;

  struct MappedObject {
    uint64_t offset = 0;
    uint64_t size = 0;
    int64_t views = 0;
  };
  std::mutex mu_;
  std::condition_variable direct_cv_;                      // a direct result came
  std::unordered_map<std::string, int64_t> local_refs_;   // guarded by mu_
  std::unordered_map<std::string, bool> dirty_;           // id -> held at last drain; guarded by mu_
  std::vector<std::string> releases_;                     // guarded by mu_
  std::unordered_map<std::string, std::string> local_values_;  // guarded by mu_
  std::unordered_map<std::string, MappedObject> mapped_;  // guarded by mu_
  std::unordered_set<std::string> direct_pending_;        // guarded by mu_
  std::unordered_set<std::string> raylet_awaits_;         // of direct_pending_; guarded by mu_
  std::unordered_set<std::string> failed_direct_;         // of local_values_: task errors; guarded by mu_
  std::atomic<uint64_t> direct_changes_{0};              // bumped (under mu_) when direct_pending_ shrinks
  AdaptiveSpin result_spin_{150};                         // AwaitDirect's: a result usually comes within 150 us
  std::atomic<bool> unmap_idle_{false};
  bool stopping_ = false;                                 // guarded by mu_
};

}  // namespace phalanx
