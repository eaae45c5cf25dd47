// What the ActorManager and the TaskManager need of each other and of the
// worker pool, and what they and the pool tell the raylet (TaskEvents,
// WorkerDeaths), as interfaces given at construction. The TaskManager implements TaskTable and the
// WorkerPool implements WorkerPoolView (WorkerSource is the part the
// ActorManager uses); each manager depends only on these (and on the
// ResourceLedger and ObjectTable), so each is unit-tested alone with fakes
// (tests/cpp/actor_manager_test.cc, task_manager_test.cc). Not thread-safe;
// the raylet's loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "scheduler/resources.h"

namespace phalanx::scheduler {

struct Worker;
class Lineage;

class TaskTable {
 public:
  virtual ~TaskTable() = default;
  // Takes a task (an actor's creation restarted from here).
  virtual void Submit(rpc::TaskSpec spec) = 0;
  virtual bool HasTask(const std::string& task_id) const = 0;
  // The spec of a task not finished yet, or nullptr.
  virtual rpc::TaskSpec* MutableSpec(const std::string& task_id) = 0;
  // The spec to send to another node (ref arguments inline); false if it cannot leave.
  virtual bool BuildForwardSpec(const std::string& task_id, rpc::TaskSpec* out) = 0;
  // Sends the task to the worker; false (and the task failed) if an argument is lost.
  virtual bool PushTo(Worker* w, const std::string& task_id) = 0;
  // Its returns fail with `code` and `why`; the task is over.
  virtual void FailTask(const std::string& task_id, StatusCode code, const std::string& why) = 0;
  // The task is over (its returns were made).
  virtual void FinishTask(const std::string& task_id, bool ok, const std::string& error) = 0;
  // Something was freed or became ready: look at the queues again.
  virtual void Redispatch() = 0;
  // Runs `fn` on the raylet's loop in `ms` (a placement tried again: a node with the labels asked for may join).
  virtual void After(int64_t ms, std::function<void()> fn) = 0;
  // How long work that no node can hold waits for one before it fails.
  virtual int64_t infeasible_timeout_ms() const = 0;
};

// What the object requests ask of the task queue (the TaskManager implements
// it; tests/cpp/object_requests_test.cc fakes it): a worker blocked in a get
// lends its resources back and takes them again, and an object whose every
// copy is gone is made again from its lineage.
class ObjectTasks {
 public:
  virtual ~ObjectTasks() = default;
  virtual void OnWorkerBlocked(Worker* w) = 0;
  virtual void OnWorkerUnblocked(Worker* w) = 0;
  // True when `object_id` is on its way again (or already was); false with *why saying why not.
  virtual bool Rebuild(const std::string& object_id, std::string* why) = 0;
};

// What the services that answer clients ask of the task queue (the
// TaskManager implements it; tests fake it): tasks submitted, workers
// registered, results reported, tasks given back, cancels.
class TaskQueue {
 public:
  virtual ~TaskQueue() = default;
  // Takes a task; the caller has counted the submitter's holds on its returns.
  virtual void Submit(rpc::TaskSpec spec) = 0;
  virtual void OnWorkerRegistered(Worker* w) = 0;
  // A worker finished the oldest task it was pushed.
  virtual void OnTaskDone(Worker* w, rpc::TaskDone done) = 0;
  // The worker gave back pushed tasks it had not started (after a recall).
  virtual void OnTasksRecalled(Worker* w, const rpc::TaskIds& ids) = 0;
  virtual void Cancel(const rpc::CancelTask& m) = 0;
};

// Where the records of ended tasks go (the GcsSession: the GCS's task table).
class TaskRecords {
 public:
  virtual ~TaskRecords() = default;
  virtual void RecordTask(const rpc::TaskRecord& r) = 0;
};

struct TaskManagerStats {
  uint64_t queued = 0;     // waiting for arguments or a worker
  uint64_t running = 0;    // pushed to a worker
  uint64_t finished = 0;
  uint64_t failed = 0;
  uint64_t retried = 0;
  uint64_t spilled = 0;    // sent to other nodes
  uint64_t reconstructed = 0;  // run again to rebuild a lost result
};

// What Inspection and the node's record read of the task queue (the TaskManager implements it).
class TaskInspection {
 public:
  virtual ~TaskInspection() = default;
  virtual TaskManagerStats Stats() const = 0;
  // The node's resources, in all and free now.
  virtual const ResourceSet& total() const = 0;
  virtual const ResourceSet& available() const = 0;
  // Each reference a task here holds: (object id, task id, running, lineage: a kept spec's).
  virtual void ForEachArgument(
      const std::function<void(const std::string&, const std::string&, bool running, bool lineage)>& fn) const = 0;
  // The timeline: a kInFlight record for each task here not finished, at most `max`.
  virtual void TraceInFlight(std::string* out, size_t max) const = 0;
  // The specs kept to rebuild lost results.
  virtual const Lineage& lineage() const = 0;
};

// What makes two workers interchangeable: the language the node's
// configuration starts them with, and the runtime environment they start in.
struct WorkerKind {
  rpc::Language language = rpc::LANGUAGE_PYTHON;
  std::string env;  // an rpc::RuntimeEnv as serialized; empty: the node's own environment
  static WorkerKind Of(const rpc::TaskSpec& spec) {
    return WorkerKind{spec.language(), spec.has_runtime_env() ? spec.runtime_env().SerializeAsString() : std::string()};
  }
  bool operator==(const WorkerKind& o) const { return language == o.language && env == o.env; }
  bool operator!=(const WorkerKind& o) const { return !(*this == o); }
};

class WorkerSource {
 public:
  virtual ~WorkerSource() = default;
  // An idle registered worker of that kind, taken out of the idle list, or nullptr.
  virtual Worker* PopIdle(const WorkerKind& kind) = 0;
  // The same, among those for which `usable` is true (the others stay idle).
  virtual Worker* PopIdleIf(const WorkerKind& kind, const std::function<bool(const Worker&)>& usable) = 0;
  // Starts a worker process; false if it could not.
  virtual bool StartWorker(const WorkerKind& kind) = 0;
  // Workers of that kind started and not registered yet.
  virtual size_t num_starting(const WorkerKind& kind) const = 0;
};

// What the TaskManager tells the raylet: records of tasks as they end, and
// warnings for the process that submitted a task.
class TaskEvents {
 public:
  virtual ~TaskEvents() = default;
  // A task changed state (the GCS's task table keeps the ends).
  virtual void OnTaskRecord(const rpc::TaskRecord& record) = 0;
  // Tells the submitting client (by its id) something it should hear now.
  virtual void Warn(const std::string& caller_id, const std::string& message) = 0;
};

// What the worker pool tells the raylet: a worker process is gone (once per worker).
class WorkerDeaths {
 public:
  virtual ~WorkerDeaths() = default;
  virtual void OnWorkerDied(Worker* w, const std::string& why) = 0;
};

// What the TaskManager asks of the worker pool, beyond the ActorManager's
// (the WorkerPool implements it; tests/cpp/task_manager_test.cc fakes it).
class WorkerPoolView : public WorkerSource {
 public:
  // Whether this node starts workers of `language` (NotFound saying how to configure it if not).
  virtual Status CanStart(rpc::Language language) const = 0;
  // A worker with nothing to run goes back to the idle list.
  virtual void PushIdle(Worker* w) = 0;
  // Every worker, live or starting.
  virtual std::vector<Worker*> All() const = 0;
  // Workers live or starting, less those stopped and not gone yet.
  virtual size_t size() const = 0;
  // Stops the longest idle worker for which `which` is true (to make room
  // for a worker of another kind); false if none is.
  virtual bool StopIdleIf(const std::function<bool(const Worker&)>& which) = 0;
};

}  // namespace phalanx::scheduler
