// TaskService: the raylet's answers to its clients about tasks: submissions
// (checked, their returns held for the submitter, a generator's stream
// opened), results a worker reports, tasks a worker gives back, results of
// direct actor calls handed in by their caller (HandedResults: also those
// another node or a stream brings), the returns a caller expects from its
// direct calls, and cancels. The queue itself is the TaskManager's; this
// is its door. It also hears the TaskManager's events (TaskEvents): the
// records go to the GCS session (TaskRecords), warnings to the submitter. Not thread-safe;
// the raylet's loop.
#pragma once

#include <cstdint>
#include <string>

#include "core/proto/phalanx.pb.h"
#include "objectstore/object_manager.h"
#include "scheduler/clients.h"
#include "scheduler/object_requests.h"
#include "scheduler/router.h"
#include "scheduler/stream_service.h"
#include "scheduler/task_table.h"

namespace phalanx::scheduler {

class TaskService final : public HandedResults, public TaskEvents {
 public:
  // `inline_threshold`: handed results at most this big stay inline.
  // Every collaborator is owned by the raylet and outlives this; none is used before the first message.
  TaskService(std::string node_id, uint64_t inline_threshold, objectstore::ObjectManager* objects, TaskQueue* tasks,
              StreamService* streams, ObjectRequests* requests, Clients* clients, TaskRecords* records);

  // Its client messages: submit, task done, tasks recalled, expected returns, direct results, cancel.
  void AddRoutes(Router& router);
  void HandleSubmit(Client& c, rpc::TaskSpec spec);
  void HandleDirectResults(Client& c, rpc::TaskDone m);
  void HandleExpectReturns(Client& c, const rpc::ExpectReturns& m);
  // HandedResults: inline values are stored here, store values adopted from their holder.
  void StoreHandedResults(rpc::TaskDone& m) override;
  // TaskEvents
  void OnTaskRecord(const rpc::TaskRecord& r) override { records_->RecordTask(r); }
  void Warn(const std::string& caller_id, const std::string& message) override;

 private:
  std::string node_id_;
  uint64_t inline_threshold_;
  objectstore::ObjectManager* om_;
  objectstore::ObjectTable& objects_;  // om_'s
  TaskQueue* tasks_;
  StreamService* streams_;
  ObjectRequests* requests_;
  Clients* clients_;
  TaskRecords* records_;
};

}  // namespace phalanx::scheduler
