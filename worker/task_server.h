// TaskServer: a worker process's side of running tasks. It takes the next
// task (NextTask): pushed by the raylet, or an actor method call written
// straight to this actor's worker by its caller (its listener starts when
// the actor's creation task is done, worker/direct_io.h); sends each result
// back the way its task came; and keeps what runs: cancels noted for it,
// the sizes of its store returns, the node that keeps a running
// generator's stream, the arguments a direct call holds until it is done.
// A direct call whose ref arguments are not ready waits in HeldCalls (with
// its caller's later calls, unless the actor runs calls concurrently), not
// in NextTask.
// Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "worker/direct_io.h"
#include "worker/held_calls.h"
#include "worker/raylet_channel.h"
#include "worker/worker_objects.h"

namespace phalanx {

class TaskServer {
 public:
  TaskServer(const WorkerIdentity& me, RayletChannel* raylet, WorkerObjects* objects, DirectIo* io);
  ~TaskServer();

  // As CoreWorker::NextTask, CoreWorker::TaskDone.
  Result<rpc::PushTask> NextTask(int64_t timeout_ms);
  Status TaskDone(rpc::TaskDone done);
  bool ReturnsHeld(const std::string& task_id);
  // A store object of `size` bytes was created: if it is a return of a task
  // running now, its size goes with the results.
  void NoteCreated(const std::string& id, uint64_t size);

  // Generators: as CoreWorker::StreamItem and CoreWorker::StreamCredit.
  Status StreamItem(rpc::TaskDone item);
  Result<rpc::StreamCreditReply> StreamCredit(const std::string& task_id, uint64_t need, int64_t timeout_ms);

  // Cancels: noted when the raylet's CANCEL_TASK is read (`from_raylet`) or
  // a caller's comes on its connection; asked by the running task.
  void NoteCancel(const std::string& task_id, bool from_raylet);
  bool CancelRequested(const std::string& task_id, bool read);
  bool CancelSignalled(const std::string& task_id);

  // From the DirectIo: frames from this actor's callers (DIRECT_HELLO,
  // DIRECT_CALL, CANCEL_TASK); a caller's connection closed (false: the
  // connection is not a caller's).
  void OnCallerFrames(uint64_t conn, std::vector<Frame>& frames);
  bool OnClose(uint64_t conn);
  void Stop();

 private:
  struct RunningDirect {
    uint64_t conn = 0;
    std::vector<std::string> fetched;   // ref arguments copied from the caller's node, held till done
    std::vector<std::string> borrowed;  // refs nested in the arguments, from the caller's node (local refs till done)
  };
  class HeldArgs;  // HeldCalls::Objects over this process's objects

  // A direct call from caller `conn` come in NextTask: runs now (returned)
  // or waits in HeldCalls (nothing returned).
  Result<std::optional<rpc::PushTask>> TakeDirectCall(uint64_t conn, rpc::PushTask t);
  // A direct call about to run (its arguments read); its result goes back to its caller.
  rpc::PushTask StartDirectCall(HeldCalls::Call call);
  // A task the raylet pushed, about to run.
  void StartPushed(rpc::PushTask* t);
  // Lets go of what a direct call that will not run holds (its caller went away).
  void ReleaseDirectArgs(const std::vector<std::string>& fetched, const std::vector<std::string>& borrowed);
  Status ReleaseHeldReturns(const rpc::TaskDone& done);
  // For in-store returns: their sizes (recorded at create) go with them. REQUIRES mu_.
  void FillReturnSizesLocked(rpc::TaskDone* done);
  // Opens this actor's listeners; their addresses go with the creation's result.
  Status StartListening(rpc::TaskDone* done);

  const WorkerIdentity& me_;
  RayletChannel* raylet_;
  WorkerObjects* objects_;
  DirectIo* io_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::string> callers_;        // connections that said hello -> the caller's node; guarded by mu_
  std::unordered_map<std::string, std::string> stream_owners_;  // running generators -> the caller's node; guarded by mu_
  std::unordered_set<std::string> cancelled_;                // tasks cancelled before they were done; guarded by mu_
  uint64_t raylet_cancels_ = 0;                              // CANCEL_TASKs from the raylet; guarded by mu_
  uint64_t cancel_signals_ = 0;                              // the raylet's SIGUSR2s handled; guarded by mu_
  std::unordered_map<std::string, RunningDirect> running_direct_;  // guarded by mu_
  std::unordered_set<std::string> creations_;                // creation tasks pushed; guarded by mu_
  std::unordered_set<std::string> running_tasks_;            // tasks taken and not done; guarded by mu_
  std::unordered_map<std::string, uint64_t> return_sizes_;   // store returns of running tasks; guarded by mu_
  bool serving_ = false;                                     // guarded by mu_
  // Direct calls whose arguments are not ready, or that wait behind their caller's first such call.
  std::unique_ptr<HeldArgs> held_args_;
  std::unique_ptr<HeldCalls> held_;
};

}  // namespace phalanx
