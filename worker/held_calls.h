// HeldCalls: an actor's side of the order of its direct calls (calls that
// callers write straight to the actor's worker, core_worker.h). A call whose
// ref arguments are not in this node's store yet waits here, not in the
// thread that takes the actor's next call, so calls whose arguments are
// ready go by. As Ray orders an actor's calls: an actor that runs one call
// at a time keeps each caller's order (a call that waits holds back its own
// caller's later calls, never another caller's); an actor that runs calls
// concurrently (async or threaded: `unordered`) takes each call as soon as
// its own arguments are ready.
//
// A thread of its own (started with the first call held) waits on the
// arguments of the calls that may go next, in slices of kWaitSliceMs, and
// wakes the taker (Objects::Wake) when a call is ready. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx {

class HeldCalls {
 public:
  static constexpr int64_t kWaitSliceMs = 10;

  // What it asks of the process's CoreWorker.
  class Objects {
   public:
    virtual ~Objects() = default;
    // Those of `ids` ready in this node's store, once one is or `timeout_ms` passed.
    virtual Result<std::vector<std::string>> WaitAny(const std::vector<std::string>& ids, int64_t timeout_ms) = 0;
    // The values of `ids` as they are now: OBJ_PENDING for those not ready;
    // store objects among the others are pinned and mapped (Unpin lets go).
    virtual Result<std::vector<rpc::ObjectValue>> GetNow(const std::vector<std::string>& ids) = 0;
    virtual void Unpin(const std::string& id) = 0;
    // The call was cancelled (phalanx.cancel) while it waited.
    virtual bool Cancelled(const std::string& task_id) = 0;
    // A held call is ready: the taker looks (NextTask).
    virtual void Wake() = 0;
  };

  struct Call {
    uint64_t caller = 0;  // the caller's connection
    rpc::PushTask task;   // its ref_args filled once it is ready
    std::vector<std::string> fetched, borrowed;  // as CoreWorker's RunningDirect
  };

  explicit HeldCalls(Objects* objects) : objects_(objects) {}
  ~HeldCalls() { Stop(); }
  HeldCalls(const HeldCalls&) = delete;
  HeldCalls& operator=(const HeldCalls&) = delete;

  void set_unordered(bool unordered);

  // Whether a call just come from `caller` must wait behind that caller's
  // held calls (an ordered actor with calls of that caller held or not taken yet).
  bool MustWait(uint64_t caller);
  // Fills the call's ref arguments if every one is ready now: true. False:
  // some are not (nothing of them kept). An error only when the raylet is gone.
  Result<bool> TryResolve(Call* call);
  // Keeps the call until it may go.
  void Hold(Call call);
  // The next call ready to go, if any.
  std::optional<Call> TakeReady();
  // The caller's connection closed: its held calls go (it hands its calls
  // in flight to the raylet). Returned to let go of what they hold.
  std::vector<Call> DropCaller(uint64_t caller);
  void Stop();

  size_t num_held();

 private:
  struct Held {
    Call call;
    bool ready = false;
    bool gone = false;                 // taken out of held_ (promoted or dropped)
    std::vector<std::string> waiting;  // ref arguments not seen ready yet
  };
  void Run();
  // Under mu_: the calls the thread waits for (each caller's first not
  // ready, or every one not ready when unordered).
  std::vector<std::shared_ptr<Held>> CandidatesLocked();
  // Under mu_: moves the calls that may go now to ready_; true if any moved.
  bool PromoteLocked();
  // A cancelled call goes, its arguments unread (the worker reports it cancelled).
  static void MarkCancelled(Call* call);
  static std::vector<std::string> RefArgs(const rpc::PushTask& task);
  // Arguments that cannot be read: the call runs and raises `why`.
  static std::vector<rpc::ObjectValue> LostValues(const std::vector<std::string>& ids, const Status& why);
  // Fills the call's ref arguments from `values` (of RefArgs, none pending).
  static void Fill(Call* call, std::vector<rpc::ObjectValue> values);

  Objects* objects_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool unordered_ = false;
  bool stopping_ = false;
  std::thread thread_;
  // Held calls of each caller, oldest first (shared: the thread keeps those it waits for outside mu_).
  std::unordered_map<uint64_t, std::deque<std::shared_ptr<Held>>> held_;
  std::deque<Call> ready_;                        // ready to be taken, in order
  std::unordered_map<uint64_t, size_t> pending_;  // caller -> its calls held or in ready_
  // Calls held or in ready_, read without mu_ (NextTask's common case: none, no lock taken).
  std::atomic<size_t> pending_total_{0};
  size_t num_held_ = 0;
};

}  // namespace phalanx
