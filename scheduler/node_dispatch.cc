// The raylet's front door: one handler per message type a driver or worker
// may send on the node's Unix socket. Each parses and checks its message
// (ids of the right size, counts within limits) before anything acts on it;
// a message that fails is named in a warning and its connection is closed.
// Nothing is read from a client before it registers.
#include <array>
#include <chrono>

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/status_proto.h"
#include "scheduler/node_manager.h"

namespace phalanx::scheduler {

namespace {
// How long a function registered on another node may take to reach the GCS.
constexpr auto kFunctionWait = std::chrono::seconds(5);

template <typename M>
bool Parse(M* m, const char* body, size_t len) {
  return m->ParseFromArray(body, static_cast<int>(len));
}
}  // namespace

struct NodeManager::ClientRoute {
  const char* what = nullptr;  // for the warning when it is malformed
  // Parses, checks and acts; false when the message is malformed.
  bool (*handle)(NodeManager* nm, const std::shared_ptr<Client>& c, uint64_t req, const char* body, size_t len) =
      nullptr;
};

const NodeManager::ClientRoute* NodeManager::RouteOf(uint16_t type) {
  using C = const std::shared_ptr<Client>&;
  static const auto routes = [] {
    std::array<ClientRoute, rpc::MessageType_ARRAYSIZE> r{};
    auto on = [&r](rpc::MessageType t, const char* what, decltype(ClientRoute::handle) fn) { r[t] = {what, fn}; };
    on(rpc::REGISTER_CLIENT, "registration", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::RegisterClient m;
      if (!Parse(&m, b, n)) return false;
      nm->HandleRegister(c, req, m);
      return true;
    });
    on(rpc::SUBMIT_TASK, "task", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::TaskSpec m;
      if (!Parse(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
      nm->HandleSubmit(*c, std::move(m));
      return true;
    });
    on(rpc::TASK_DONE, "task result", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::TaskDone m;
      if (!Parse(&m, b, n) || c->worker == nullptr || !ResultIdsOk(m)) return false;
      if (m.item()) {
        nm->streams_.HandleWorkerItems(*c, std::move(m));
      } else {
        nm->tasks_.OnTaskDone(c->worker, std::move(m));
      }
      return true;
    });
    on(rpc::TASKS_RECALLED, "recalled tasks", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::TaskIds m;
      if (!Parse(&m, b, n) || c->worker == nullptr) return false;
      nm->tasks_.OnTasksRecalled(c->worker, m);
      return true;
    });
    on(rpc::GET_OBJECTS, "get", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::GetObjects m;
      if (!Parse(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
      nm->object_requests_.HandleGet(c, req, m);
      return true;
    });
    on(rpc::WAIT_OBJECTS, "wait", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::WaitObjects m;
      if (!Parse(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
      nm->object_requests_.HandleWait(c, req, m);
      return true;
    });
    on(rpc::CREATE_OBJECT, "create", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::CreateObject m;
      if (!Parse(&m, b, n) || !IsObjectId(m.object_id()) || !AllObjectIds(m.contained_ids())) return false;
      nm->object_requests_.HandleCreate(*c, req, m);
      return true;
    });
    on(rpc::SEAL_OBJECT, "seal", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::SealObject m;
      if (!Parse(&m, b, n) || !IsObjectId(m.object_id())) return false;
      nm->object_requests_.HandleSeal(*c, m.object_id());
      return true;
    });
    on(rpc::ABORT_CREATE, "abort", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::SealObject m;
      if (!Parse(&m, b, n) || !IsObjectId(m.object_id())) return false;
      if (c->creating.erase(m.object_id())) nm->objects_.AbortCreate(m.object_id());
      return true;
    });
    on(rpc::PUT_INLINE, "put", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::PutInline m;
      if (!Parse(&m, b, n) || !IsObjectId(m.object_id()) || !AllObjectIds(m.contained_ids())) return false;
      nm->object_requests_.HandlePutInline(*c, std::move(m));
      return true;
    });
    on(rpc::RELEASE_OBJECTS, "release", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::ObjectIds m;
      if (!Parse(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
      nm->object_requests_.HandleRelease(*c, m);
      return true;
    });
    on(rpc::UPDATE_REFS, "reference update", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::UpdateRefs m;
      if (!Parse(&m, b, n) || !AllObjectIds(m.add()) || !AllObjectIds(m.remove())) return false;
      nm->object_requests_.HandleRefs(*c, m);
      return true;
    });
    on(rpc::REGISTER_FUNCTION, "function", [](NodeManager* nm, C, uint64_t, const char* b, size_t n) {
      rpc::RegisterFunction m;
      if (!Parse(&m, b, n)) return false;
      if (!nm->functions_.count(m.function_id())) nm->gcs_.PutFunction(m);  // for the other nodes
      nm->functions_[m.function_id()] = Function{m.name(), std::move(*m.mutable_pickled())};
      return true;
    });
    on(rpc::GET_FUNCTION, "function request", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::GetFunction m;
      if (!Parse(&m, b, n)) return false;
      auto it = nm->functions_.find(m.function_id());
      if (it == nm->functions_.end()) {
        nm->LookUpFunction(c, req, m.function_id(), std::chrono::steady_clock::now() + kFunctionWait);
        return true;
      }
      rpc::GetFunctionReply r;
      r.set_name(it->second.name);
      r.set_pickled(it->second.pickled);
      nm->Reply(*c, rpc::GET_FUNCTION, req, r);
      return true;
    });
    on(rpc::GET_STATS, "stats request", [](NodeManager* nm, C c, uint64_t req, const char*, size_t) {
      nm->inspection_.HandleStats(*c, req);
      return true;
    });
    on(rpc::GET_ACTOR, "actor lookup", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::GetActor m;
      if (!Parse(&m, b, n)) return false;
      nm->HandleGetActor(c, req, m.name());
      return true;
    });
    on(rpc::ACTOR_ROUTE, "actor route", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::ActorRoute m;
      if (!Parse(&m, b, n)) return false;
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
      if (!Parse(&m, b, n) || m.task_ids_size() != m.num_returns_size()) return false;
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
    on(rpc::FETCH_OBJECTS, "fetch", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::FetchObjects m;
      if (!Parse(&m, b, n) || !AllObjectIds(m.object_ids()) || !AllObjectIds(m.borrowed_ids())) return false;
      if (m.borrowed_ids_size() > 0 && m.node_id() != nm->node_id_) {
        // Refs nested in a direct call from that node, held there for this
        // one: borrowed, then held for the client (which lets go by UPDATE_REFS).
        std::vector<std::string> borrowed(m.borrowed_ids().begin(), m.borrowed_ids().end());
        nm->om_.Borrow(borrowed, m.node_id());
        for (const auto& id : borrowed) {
          nm->object_requests_.Hold(*c, id);
          nm->objects_.RemoveRef(id);
        }
      }
      std::vector<std::string> ids(m.object_ids().begin(), m.object_ids().end());
      for (const auto& id : ids) nm->object_requests_.Hold(*c, id);  // until the client lets go (UPDATE_REFS)
      if (m.node_id() != nm->node_id_) nm->om_.Fetch(ids, m.node_id());
      return true;
    });
    on(rpc::LEND_REFS, "lend", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::LendRefs m;
      if (!Parse(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
      Status st;
      if (m.node_id() == nm->node_id_ || !nm->peers_.IsAlive(m.node_id())) {
        st = Status::InvalidArgument("refs are lent to other live nodes only");
      } else {
        for (const auto& id : m.object_ids()) nm->om_.HoldFor(m.node_id(), id);
      }
      nm->Reply(*c, rpc::LEND_REFS, req, ToProto(st));
      return true;
    });
    on(rpc::REDUCE_OBJECTS, "reduce", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::ReduceObjects m;
      if (!Parse(&m, b, n) || (!IsObjectId(m.out_id()) && m.out_ids_size() == 0) || !AllObjectIds(m.input_ids()) ||
          !AllObjectIds(m.out_ids())) {
        return false;
      }
      nm->collectives_.HandleReduce(*c, m);
      return true;
    });
    on(rpc::RENDEZVOUS, "rendezvous", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::Rendezvous m;
      if (!Parse(&m, b, n)) return false;
      nm->collectives_.HandleRendezvous(c, req, m);
      return true;
    });
    on(rpc::LOCATE_OBJECTS, "locate", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::LocateObjects m;
      if (!Parse(&m, b, n) || m.node_ids_size() != m.object_ids_size() || m.sizes_size() != m.object_ids_size() ||
          !AllObjectIds(m.object_ids())) {
        return false;
      }
      nm->collectives_.HandleLocate(*c, m);
      return true;
    });
    on(rpc::REDUCED_INPUTS, "reduced inputs", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::ObjectIds m;
      if (!Parse(&m, b, n) || m.object_ids_size() != 1 || !IsObjectId(m.object_ids(0))) return false;
      nm->collectives_.HandleReducedInputs(c, req, m.object_ids(0));
      return true;
    });
    on(rpc::DIRECT_RESULTS, "direct results", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::TaskDone m;
      if (!Parse(&m, b, n) || !ResultIdsOk(m)) return false;
      nm->HandleDirectResults(*c, std::move(m));
      return true;
    });
    on(rpc::KILL_ACTOR, "actor kill", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::KillActor m;
      if (!Parse(&m, b, n)) return false;
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
      if (!Parse(&m, b, n) || c->worker == nullptr || m.actor_id().empty() || c->worker->actor_id != m.actor_id()) {
        return false;
      }
      nm->HandleCheckpoint(c, req, std::move(m));
      return true;
    });
    on(rpc::STREAM_NEXT, "stream read", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::StreamNext m;
      if (!Parse(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
      nm->streams_.HandleStreamNext(c, req, m);
      return true;
    });
    on(rpc::STREAM_DROP, "stream drop", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::TaskIds m;
      if (!Parse(&m, b, n)) return false;
      for (const auto& tid : m.task_ids()) nm->streams_.table().Drop(tid, c->client_id);
      return true;
    });
    on(rpc::STREAM_CREDIT, "stream credit", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::StreamCredit m;
      if (!Parse(&m, b, n) || c->worker == nullptr || m.task_id().size() != kTaskIdSize) return false;
      nm->streams_.HandleStreamCredit(c, req, m);
      return true;
    });
    on(rpc::CANCEL_TASK, "cancel", [](NodeManager* nm, C, uint64_t, const char* b, size_t n) {
      rpc::CancelTask m;
      if (!Parse(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
      nm->tasks_.Cancel(m);
      return true;
    });
    on(rpc::PG_CREATE, "placement group", [](NodeManager* nm, C c, uint64_t, const char* b, size_t n) {
      rpc::CreatePlacementGroup m;
      if (!Parse(&m, b, n)) return false;
      nm->placement_.HandleCreate(*c, std::move(m));
      return true;
    });
    on(rpc::PG_REMOVE, "placement group removal", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::PlacementGroupRequest m;
      if (!Parse(&m, b, n) || m.pg_id().size() != kTaskIdSize) return false;
      nm->placement_.HandleRemove(c, req, m);
      return true;
    });
    on(rpc::PG_GET, "placement group lookup", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::PlacementGroupRequest m;
      if (!Parse(&m, b, n) || (!m.pg_id().empty() && m.pg_id().size() != kTaskIdSize)) return false;
      nm->placement_.HandleGet(c, req, m);
      return true;
    });
    on(rpc::TRACE_COLLECT, "timeline request", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::TraceRequest m;
      if (!Parse(&m, b, n)) return false;
      nm->inspection_.HandleTrace(c, req, m);
      return true;
    });
    on(rpc::MEMORY_SUMMARY, "memory summary", [](NodeManager* nm, C c, uint64_t req, const char* b, size_t n) {
      rpc::MemoryRequest m;
      if (!Parse(&m, b, n)) return false;
      nm->inspection_.HandleMemory(c, req, m);
      return true;
    });
    return r;
  }();
  if (type >= routes.size() || routes[type].handle == nullptr) return nullptr;
  return &routes[type];
}

void NodeManager::OnFrame(const std::shared_ptr<Client>& c, const FrameHeader& h, const char* body, size_t len) {
  auto bad = [&](const char* what) {
    PHALANX_LOG(Warning) << "malformed " << what << " from " << c->conn->peer_name() << " (pid " << c->pid
                         << "); closing its connection";
    c->conn->Close();
  };
  if (!c->registered && h.type != rpc::REGISTER_CLIENT) return bad("first message (expected registration)");
  const ClientRoute* route = RouteOf(h.type);
  if (route == nullptr) return bad("message type");
  if (!route->handle(this, c, h.request_id, body, len)) bad(route->what);
}

}  // namespace phalanx::scheduler
