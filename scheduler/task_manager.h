// TaskManager: the node's task queue and dispatch. A submitted task waits
// until every reference argument is ready, then for a worker and the CPUs it
// asks for; it is pushed to that worker with its arguments resolved (inline
// bytes or pinned store offsets). Short tasks of the same shape are
// pipelined to a leased worker (up to `pipeline_depth` in flight) so a worker
// never idles for a round trip; long ones never queue behind each other. A
// worker blocked in a get lends its CPUs back. When a worker dies its running
// task is retried up to max_retries, then its returns fail with WorkerDied.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <deque>
#include <map>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>

#include "core/proto/phalanx.pb.h"
#include "objectstore/object_table.h"
#include "scheduler/actor_manager.h"
#include "scheduler/lineage.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/resource_ledger.h"
#include "scheduler/resources.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

struct TaskManagerOptions {
  int pipeline_depth = 8;         // tasks in flight per worker for short tasks
  double short_task_seconds = 0.002;
  int64_t infeasible_timeout_ms = 60000;  // a request no node can hold fails after this
  uint64_t inline_threshold = 100 * 1024;  // results from other nodes above this go to the store
  uint64_t lineage_max_bytes = 64ull << 20;  // specs kept to rebuild lost results (scheduler/lineage.h)
};

class TaskManager final : public TaskTable,
                          public TaskQueue,
                          public WorkerDeaths,
                          public ObjectTasks,
                          public ForwardedTasks,
                          public GroupTasks,
                          public TaskInspection {
 public:
  // `ledger`: the node's resources, which the actors (and placement groups)
  // take from too; `actors`: the actors whose home is this node; `events`:
  // told of task records and warnings for submitters; `remote`: the other
  // nodes (ready tasks that do not fit here are spilled there; SPREAD, node
  // affinity; null: this node only); `groups`: where placement groups'
  // bundles are (null: none). All owned by the caller, outliving this.
  TaskManager(boost::asio::io_context& io, objectstore::ObjectTable* objects, WorkerPoolView* pool,
              ResourceLedger* ledger, ActorManager* actors, TaskEvents* events, RemoteNodes* remote,
              GroupPlacement* groups, TaskManagerOptions options, std::string node_id);

  // Takes a task. The caller has already counted the submitter's hold on the
  // return ids. Holds references on the arguments until the task ends.
  void Submit(rpc::TaskSpec spec) override;
  // A worker finished the oldest task it was pushed.
  void OnTaskDone(Worker* w, rpc::TaskDone done) override;
  void OnWorkerRegistered(Worker* w) override;
  // WorkerDeaths (the pool's): the worker's tasks are failed or retried, its actor's death handled.
  void OnWorkerDied(Worker* w, const std::string& why) override;
  void OnWorkerBlocked(Worker* w) override;
  void OnWorkerUnblocked(Worker* w) override;
  // The worker gave back pushed tasks it had not started (after a recall).
  void OnTasksRecalled(Worker* w, const rpc::TaskIds& ids) override;

  // Lineage (scheduler/lineage.h): a result of a task submitted here was
  // freed here, or copied here: it needs no rebuilding.
  void OnReturnSafe(const std::string& object_id);
  // Every copy of `object_id` is gone: runs the task that made it again when
  // its spec is kept here and it has retries left (its arguments are waited
  // for as usual, so lost ones are rebuilt in turn). True when the object is
  // on its way again (or already was); false with *why saying why not.
  bool Rebuild(const std::string& object_id, std::string* why) override;
  // `phalanx memory`: fn(object id, task name, running) for each ref argument
  // of a task here (queued or running), then fn(id, task name, false) with
  // lineage = true for each reference a kept spec holds.
  void ForEachArgument(const std::function<void(const std::string&, const std::string&, bool running,
                                                bool lineage)>& fn) const override;
  const Lineage& lineage() const override { return lineage_; }

  // A spilled task finished on another node; its results are in `reply`.
  void OnForwardedDone(const std::string& task_id, rpc::ForwardTaskReply reply) override;
  // The node running a spilled task went away: retry it (max_retries) or fail it.
  // `reached` false: the node could not be connected to, so the task never
  // ran there; it is placed again without spending a retry (up to
  // kFreeReplacements times: the node is suspected meanwhile, so it is not
  // picked again until it heartbeats).
  void OnForwardFailed(const std::string& task_id, const std::string& why, bool reached) override;
  static constexpr int kFreeReplacements = 8;
  // phalanx.cancel: a task queued here never runs; one running here gets
  // KeyboardInterrupt (CANCEL_TASK to its worker, and SIGUSR2 to a task's
  // worker, whose handler raises it if that task still runs), or with
  // `force` its worker (not an actor's) is killed; one spilled to another
  // node is cancelled there. Its returns fail with TaskCancelledError; it is
  // not retried. A task that is over, or unknown here, is left alone.
  // With `recursive`, the tasks here whose parent it is are cancelled too
  // (and theirs), whether or not it still runs.
  void Cancel(const rpc::CancelTask& m) override;

  // TaskTable (what the ActorManager asks of it).
  bool PushTo(Worker* w, const std::string& task_id) override { return Push(w, task_id); }
  void FailTask(const std::string& task_id, StatusCode code, const std::string& why) override;
  // Fails the tasks here that wait to run in placement group `pg_id` (it was removed).
  void FailGroup(const std::string& pg_id, const std::string& why) override;
  void FinishTask(const std::string& task_id, bool ok, const std::string& error) override { Finish(task_id, ok, error); }
  rpc::TaskSpec* MutableSpec(const std::string& task_id) override;
  bool HasTask(const std::string& task_id) const override { return tasks_.count(task_id) > 0; }
  // The timeline (core/trace.h): a kInFlight kTask record for each task here
  // not finished (queued, running, or sent on), at most `max`.
  void TraceInFlight(std::string* out, size_t max) const override;
  bool BuildForwardSpec(const std::string& task_id, rpc::TaskSpec* out) override;
  void Redispatch() override { Dispatch(); }
  void After(int64_t ms, std::function<void()> fn) override;
  int64_t infeasible_timeout_ms() const override { return options_.infeasible_timeout_ms; }
  const ResourceSet& available() const override { return ledger_->available(); }
  const ResourceSet& total() const override { return ledger_->total(); }
  TaskManagerStats Stats() const override;

 private:
  struct Task {
    rpc::TaskSpec spec;
    ResourceSet need;
    int deps_left = 0;
    std::vector<std::string> pushed_pins;  // store args pinned for the worker at push
    bool pushed_long = false;              // counted in its worker's long_inflight
    bool pushed = false;                   // handed to a worker (running, or queued in it)
    bool placed = false;                   // its scheduling strategy was applied
    int64_t labels_unmet_since = 0;        // (steady ms) no live node had the labels it asks for, since
    int64_t affinity_missed_since = 0;     // (steady ms) its hard affinity's node was not in the view, since
    std::string spilled_to;                // the node it was sent to
    bool cancelled = false;                // phalanx.cancel reached it while it ran
    int unreached = 0;                     // sent to nodes that could not be connected to
    // The timeline (core/trace.h; 0 while tracing is off): when it was queued
    // here and handed to a worker, and that worker.
    uint64_t queued_ns = 0;
    uint64_t dispatched_ns = 0;
    int32_t worker_pid = 0;
  };
  void Dispatch();
  void BecomeReady(const std::string& task_id);
  // Warns the caller now and fails the task after the infeasible timeout.
  void WatchInfeasible(const std::string& task_id);
  // The spec to send to another node: ref arguments resolved inline. False
  // when the task cannot leave (nested refs, or arguments whose values hold
  // refs). Store-sized arguments stay refs: the other node copies them.
  bool BuildForward(const Task& t, rpc::TaskSpec* out);
  // The timeline: `flags` and kActorCall for an actor call (core/trace.h kTask).
  static uint16_t TraceFlags(const Task& t, uint16_t flags);
  // The timeline: `t` takes each of its ref arguments (core/trace.h kArgument).
  void TraceArguments(const Task& t, uint64_t at_ns);
  bool TrySpill(const std::string& task_id);
  // SPREAD, node affinity, placement groups: true when the task was sent
  // elsewhere (or failed); *wait when it must wait for its group (it is
  // looked at again when the group is placed: Redispatch).
  bool PlaceByStrategy(const std::string& task_id, bool* wait);
  bool Feasible(const ResourceSet& need) const;
  Worker* PipelineTarget(const Task& t);
  bool Push(Worker* w, const std::string& task_id);
  void ReleaseArgs(Task& t);
  void ReleaseHeld(std::vector<std::string> held);  // references the lineage held
  void Finish(const std::string& task_id, bool ok, const std::string& error);
  void ReleaseLeaseIfIdle(Worker* w);
  bool IsShort(const std::string& function_id) const;
  // Removes `task_id` from the worker's in-flight accounting.
  void Unpush(Worker* w, Task& t);
  void Record(const Task& t, rpc::TaskState state, const std::string& error);
  size_t SoftWorkerLimit() const;
  // The soft limit for a task asking `num_cpus` (more for a fraction of a CPU).
  size_t WorkerLimitFor(double num_cpus) const;
  // At the worker limit with none idle of `kind`: stops an idle one of another kind.
  void MakeRoomFor(const WorkerKind& kind);

  boost::asio::io_context& io_;
  objectstore::ObjectTable* objects_;
  WorkerPoolView* pool_;
  ResourceLedger* ledger_;
  ActorManager* actors_;
  TaskManagerOptions options_;
  std::unordered_map<std::string, Task> tasks_;
  // Ready tasks, FIFO within a queue. A queue per (depth, resource shape), the deepest first: a task that
  // cannot run now (say it wants a busy GPU) does not hold back tasks of other shapes, and the children a
  // blocked parent waits for go before new parents (which would each take a worker and block in turn).
  using ReadyKey = std::pair<int64_t, std::string>;  // (-depth, shape)
  static ReadyKey KeyOf(const Task& t) { return {-static_cast<int64_t>(t.spec.depth()), t.need.ToString()}; }
  std::map<ReadyKey, std::deque<std::string>> ready_;
  size_t num_ready_ = 0;
  TaskEvents* events_;
  RemoteNodes* remote_;
  GroupPlacement* groups_;
  std::string node_id_;
  std::vector<Worker*> leased_;                         // workers holding a lease
  std::unordered_map<std::string, double> exec_ewma_;  // function id -> seconds
  size_t blocked_ = 0;
  TaskManagerStats stats_;
  Lineage lineage_;
};

}  // namespace phalanx::scheduler
