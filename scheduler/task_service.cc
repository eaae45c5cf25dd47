#include "scheduler/task_service.h"

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/status_proto.h"

namespace phalanx::scheduler {

TaskService::TaskService(std::string node_id, uint64_t inline_threshold, objectstore::ObjectManager* objects,
                         TaskQueue* tasks, StreamService* streams, ObjectRequests* requests, Clients* clients,
                         TaskRecords* records)
    : node_id_(std::move(node_id)),
      inline_threshold_(inline_threshold),
      om_(objects),
      objects_(objects->table()),
      tasks_(tasks),
      streams_(streams),
      requests_(requests),
      clients_(clients),
      records_(records) {}

void TaskService::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  router.OnClient(rpc::SUBMIT_TASK, "task", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::TaskSpec m;
    if (!ParseBody(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
    HandleSubmit(*c, std::move(m));
    return true;
  });
  router.OnClient(rpc::TASK_DONE, "task result", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::TaskDone m;
    if (!ParseBody(&m, b, n) || c->worker == nullptr || !ResultIdsOk(m)) return false;
    if (m.item()) {
      streams_->HandleWorkerItems(*c, std::move(m));
    } else {
      tasks_->OnTaskDone(c->worker, std::move(m));
    }
    return true;
  });
  router.OnClient(rpc::TASKS_RECALLED, "recalled tasks", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::TaskIds m;
    if (!ParseBody(&m, b, n) || c->worker == nullptr) return false;
    tasks_->OnTasksRecalled(c->worker, m);
    return true;
  });
  router.OnClient(rpc::EXPECT_RETURNS, "expected returns", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::ExpectReturns m;
    if (!ParseBody(&m, b, n) || m.task_ids_size() != m.num_returns_size()) return false;
    for (int i = 0; i < m.task_ids_size(); ++i) {
      if (m.task_ids(i).size() != kTaskIdSize || m.num_returns(i) < 0 || m.num_returns(i) > kMaxReturns) {
        return false;
      }
    }
    for (const auto* ids : {&m.streams(), &m.dynamic_streams()}) {
      for (const auto& tid : *ids) {
        if (tid.size() != kTaskIdSize) return false;
      }
    }
    HandleExpectReturns(*c, m);
    return true;
  });
  router.OnClient(rpc::DIRECT_RESULTS, "direct results", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::TaskDone m;
    if (!ParseBody(&m, b, n) || !ResultIdsOk(m)) return false;
    HandleDirectResults(*c, std::move(m));
    return true;
  });
  router.OnClient(rpc::CANCEL_TASK, "cancel", [this](C, uint64_t, const char* b, size_t n) {
    rpc::CancelTask m;
    if (!ParseBody(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
    tasks_->Cancel(m);
    return true;
  });
}

void TaskService::HandleSubmit(Client& c, rpc::TaskSpec spec) {
  Status valid = ValidateTaskSpec(spec);
  if (!valid.ok()) {  // said to the client; nothing of it is kept
    PHALANX_LOG(Warning) << "refused a task from pid " << c.pid << ": " << valid.message();
    c.conn->Send(rpc::CLIENT_WARNING, 0, 0, ToProto(valid));
    if (spec.num_returns() < 0 || spec.num_returns() > kMaxReturns) return;
    for (int i = 1; i <= spec.num_returns(); ++i) {
      std::string id = MakeObjectId(spec.task_id(), static_cast<uint32_t>(i));
      if (!spec.returns_held()) requests_->Hold(c, id);
      objects_.MarkLost(id, valid.code(), valid.message());
    }
    return;
  }
  for (int i = 1; i <= spec.num_returns(); ++i) {
    std::string id = MakeObjectId(spec.task_id(), static_cast<uint32_t>(i));
    // A direct actor call handed back after its connection broke: the caller
    // already holds its returns (and its stream is open); the task now produces them.
    if (spec.returns_held()) {
      c.expected.erase(id);
    } else {
      requests_->Hold(c, id);
    }
  }
  if (spec.generator() != rpc::GENERATOR_NONE && !spec.returns_held()) {
    streams_->table().Open(spec.task_id(), c.client_id, spec.generator() == rpc::GENERATOR_DYNAMIC);
  }
  tasks_->Submit(std::move(spec));
}

void TaskService::HandleExpectReturns(Client& c, const rpc::ExpectReturns& m) {
  for (int i = 0; i < m.task_ids_size(); ++i) {
    for (int k = 1; k <= m.num_returns(i); ++k) {
      std::string id = MakeObjectId(m.task_ids(i), static_cast<uint32_t>(k));
      requests_->Hold(c, id);
      c.expected.insert(id);
    }
  }
  for (const auto& tid : m.streams()) streams_->table().Open(tid, c.client_id, /*dynamic=*/false);
  for (const auto& tid : m.dynamic_streams()) streams_->table().Open(tid, c.client_id, /*dynamic=*/true);
}

void TaskService::HandleDirectResults(Client& c, rpc::TaskDone m) {
  for (const auto& r : m.returns()) c.expected.erase(r.object_id());
  if (m.item()) return streams_->StoreItems(std::move(m));
  StoreHandedResults(m);
}

void TaskService::StoreHandedResults(rpc::TaskDone& m) {
  // Store results made on another node stay there, held for this node, until
  // their bytes are needed here (ObjectTable::SetRemote).
  std::vector<std::string> remote;
  std::vector<uint64_t> sizes;
  for (auto& r : *m.mutable_returns()) {
    const std::string& id = r.object_id();
    if (r.in_store() && !m.holder_node().empty() && m.holder_node() != node_id_) {
      remote.push_back(id);
      sizes.push_back(r.size());
      continue;
    }
    if (r.in_store()) {
      // Created and sealed here by the actor's worker, which held it until
      // now: the caller's hold (EXPECT_RETURNS) keeps it from here on.
      Client* holder = clients_->Find(m.release_holder());
      if (holder != nullptr && holder->holds.erase(id)) objects_.RemoveRef(id);
      if (holder == nullptr && !objects_.IsReady(id)) {
        objects_.MarkLost(id, StatusCode::kObjectLost, "the actor's worker that made it exited before handing it over");
      }
      continue;
    }
    std::vector<std::string> contained(r.contained_ids().begin(), r.contained_ids().end());
    if (r.data().size() <= inline_threshold_) {
      objects_.PutInline(id, std::move(*r.mutable_data()), std::move(contained));
      continue;
    }
    // A large result from an actor on another node came inline: it goes to the store.
    Status st = objects_.PutInStore(id, r.data(), std::move(contained));
    if (!st.ok()) objects_.MarkLost(id, st.code(), "cannot store the result of an actor call: " + st.message());
  }
  if (remote.empty()) return;
  om_->Adopt(m.holder_node(), m.release_holder(), remote);
  for (size_t i = 0; i < remote.size(); ++i) {
    if (!objects_.SetRemote(remote[i], m.holder_node(), sizes[i])) om_->Release(m.holder_node(), {remote[i]});
  }
}

void TaskService::Warn(const std::string& caller_id, const std::string& message) {
  if (Client* c = clients_->Find(caller_id)) {
    c->conn->Send(rpc::CLIENT_WARNING, 0, 0, ToProto(Status(StatusCode::kInfeasible, message)));
  }
}

}  // namespace phalanx::scheduler
