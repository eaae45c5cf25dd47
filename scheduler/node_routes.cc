// The NodeManager's own routes (scheduler/router.h): registration, tasks
// and actors, the client messages no service owns yet. Each
// parses and checks its message before anything acts on it.
#include <chrono>

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/status_proto.h"
#include "scheduler/node_manager.h"

namespace phalanx::scheduler {

void NodeManager::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  NodeManager* nm = this;
  auto on = [&router, nm](rpc::MessageType t, const char* what,
                          bool (*handle)(NodeManager*, C, uint64_t, const char*, size_t)) {
    router.OnClient(t, what, [nm, handle](C c, uint64_t req, const char* b, size_t n) {
      return handle(nm, c, req, b, n);
    });
  };
  on(rpc::REGISTER_CLIENT, "registration", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
    rpc::RegisterClient m;
    if (!ParseBody(&m, b, n)) return false;
    nm->HandleRegister(c, req, m);
    return true;
  });
  on(rpc::SUBMIT_TASK, "task", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
    rpc::TaskSpec m;
    if (!ParseBody(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
    nm->HandleSubmit(*c, std::move(m));
    return true;
  });
  on(rpc::TASK_DONE, "task result", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
    rpc::TaskDone m;
    if (!ParseBody(&m, b, n) || c->worker == nullptr || !ResultIdsOk(m)) return false;
    if (m.item()) {
      nm->streams_.HandleWorkerItems(*c, std::move(m));
    } else {
      nm->tasks_.OnTaskDone(c->worker, std::move(m));
    }
    return true;
  });
  on(rpc::TASKS_RECALLED, "recalled tasks", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
    rpc::TaskIds m;
    if (!ParseBody(&m, b, n) || c->worker == nullptr) return false;
    nm->tasks_.OnTasksRecalled(c->worker, m);
    return true;
  });
  on(rpc::GET_ACTOR, "actor lookup", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
    rpc::GetActor m;
    if (!ParseBody(&m, b, n)) return false;
    nm->HandleGetActor(c, req, m.name());
    return true;
  });
  on(rpc::ACTOR_ROUTE, "actor route", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
    rpc::ActorRoute m;
    if (!ParseBody(&m, b, n)) return false;
    std::weak_ptr<Client> weak = c;
    std::vector<std::string> calls(m.task_ids().begin(), m.task_ids().end());
    nm->actors_.Route(m.actor_id(), [nm, weak, req, calls](rpc::ActorRouteReply r) {
      bool done = true;
      for (const auto& tid : calls) done = done && !nm->tasks_.HasTask(tid);
      r.set_calls_done(done);
      if (auto cl = weak.lock()) nm->Reply(*cl, rpc::ACTOR_ROUTE, req, r);
    });
    return true;
  });
  on(rpc::EXPECT_RETURNS, "expected returns", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
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
    nm->HandleExpectReturns(*c, m);
    return true;
  });
  on(rpc::DIRECT_RESULTS, "direct results", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
    rpc::TaskDone m;
    if (!ParseBody(&m, b, n) || !ResultIdsOk(m)) return false;
    nm->HandleDirectResults(*c, std::move(m));
    return true;
  });
  on(rpc::KILL_ACTOR, "actor kill", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
    rpc::KillActor m;
    if (!ParseBody(&m, b, n)) return false;
    // (answered once the actor is killed: on another node, once that node said so)
    std::weak_ptr weak(c);
    nm->actors_.Kill(m.actor_id(), m.no_restart(), [nm, weak, req](const Status& st) {
      auto cl = weak.lock();
      if (!cl || cl->conn->closed()) return;
      rpc::KillActorReply reply;
      *reply.mutable_status() = ToProto(st);
      nm->Reply(*cl, rpc::KILL_ACTOR, req, reply);
    });
    return true;
  });
  on(rpc::ACTOR_CHECKPOINT, "actor checkpoint", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
    rpc::ActorCheckpoint m;
    // Only the actor's own worker keeps or reads its state.
    if (!ParseBody(&m, b, n) || c->worker == nullptr || m.actor_id().empty() || c->worker->actor_id != m.actor_id()) {
      return false;
    }
    nm->HandleCheckpoint(c, req, std::move(m));
    return true;
  });
  on(rpc::CANCEL_TASK, "cancel", [](NodeManager* nm, C, uint64_t, const char* b, size_t n) {
    rpc::CancelTask m;
    if (!ParseBody(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
    nm->tasks_.Cancel(m);
    return true;
  });
}

}  // namespace phalanx::scheduler
