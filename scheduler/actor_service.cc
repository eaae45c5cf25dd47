#include "scheduler/actor_service.h"

#include "core/status_proto.h"

namespace phalanx::scheduler {

ActorService::ActorService(ActorRegistry* actors, TaskTable* tasks, GcsClient* gcs, uint64_t checkpoint_max_bytes)
    : actors_(actors), tasks_(tasks), gcs_(gcs), checkpoint_max_bytes_(checkpoint_max_bytes) {}

void ActorService::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  router.OnClient(rpc::GET_ACTOR, "actor lookup", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::GetActor m;
    if (!ParseBody(&m, b, n)) return false;
    HandleGetActor(c, req, m.name());
    return true;
  });
  router.OnClient(rpc::ACTOR_ROUTE, "actor route", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::ActorRoute m;
    if (!ParseBody(&m, b, n)) return false;
    HandleRoute(c, req, m);
    return true;
  });
  router.OnClient(rpc::KILL_ACTOR, "actor kill", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::KillActor m;
    if (!ParseBody(&m, b, n)) return false;
    HandleKill(c, req, m);
    return true;
  });
  router.OnClient(rpc::ACTOR_CHECKPOINT, "actor checkpoint", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::ActorCheckpoint m;
    // Only the actor's own worker keeps or reads its state.
    if (!ParseBody(&m, b, n) || c->worker == nullptr || m.actor_id().empty() || c->worker->actor_id != m.actor_id()) {
      return false;
    }
    HandleCheckpoint(c, req, std::move(m));
    return true;
  });
}

void ActorService::HandleGetActor(const std::shared_ptr<Client>& c, uint64_t req, const std::string& name) {
  // (An actor created here still claiming its name cluster-wide: once it has it, or lost it.)
  std::weak_ptr<Client> weak = c;
  actors_->WhenNamed(name, [this, weak, req, name] {
    if (auto cl = weak.lock()) LookUpActor(cl, req, name);
  });
}

void ActorService::LookUpActor(const std::shared_ptr<Client>& c, uint64_t req, const std::string& name) {
  auto r = actors_->Lookup(name);
  if (r.ok()) return Clients::Reply(*c, rpc::GET_ACTOR, req, r.value());
  // Not created here: ask the GCS, which every node's actors are in.
  std::weak_ptr<Client> weak = c;
  gcs_->GetAllActors([weak, req, name](Result<std::vector<rpc::ActorInfo>> all) {
    rpc::GetActorReply reply;
    bool found = false;
    if (all.ok()) {
      for (const auto& a : all.value()) {
        if (a.name() == name && a.state() != rpc::ACTOR_DEAD) {
          reply.set_actor_id(a.actor_id());
          reply.set_function_id(a.function_id());
          reply.set_class_name(a.class_name());
          reply.set_state(a.state());
          found = true;
          break;
        }
      }
    }
    if (!found) *reply.mutable_status() = ToProto(Status::NotFound("no live actor named '" + name + "'"));
    if (auto cl = weak.lock()) Clients::Reply(*cl, rpc::GET_ACTOR, req, reply);
  });
}

void ActorService::HandleRoute(const std::shared_ptr<Client>& c, uint64_t req, const rpc::ActorRoute& m) {
  std::weak_ptr<Client> weak = c;
  std::vector<std::string> calls(m.task_ids().begin(), m.task_ids().end());
  actors_->Route(m.actor_id(), [this, weak, req, calls](rpc::ActorRouteReply r) {
    bool done = true;
    for (const auto& tid : calls) done = done && !tasks_->HasTask(tid);
    r.set_calls_done(done);
    if (auto cl = weak.lock()) Clients::Reply(*cl, rpc::ACTOR_ROUTE, req, r);
  });
}

void ActorService::HandleKill(const std::shared_ptr<Client>& c, uint64_t req, const rpc::KillActor& m) {
  // (answered once the actor is killed: on another node, once that node said so)
  std::weak_ptr weak(c);
  actors_->Kill(m.actor_id(), m.no_restart(), [weak, req](const Status& st) {
    auto cl = weak.lock();
    if (!cl || cl->conn->closed()) return;
    rpc::KillActorReply reply;
    *reply.mutable_status() = ToProto(st);
    Clients::Reply(*cl, rpc::KILL_ACTOR, req, reply);
  });
}

void ActorService::HandleCheckpoint(const std::shared_ptr<Client>& c, uint64_t req, rpc::ActorCheckpoint m) {
  std::weak_ptr<Client> weak = c;
  auto reply = [weak, req](const Status& st, bool found, std::string state) {
    auto c = weak.lock();
    if (!c) return;
    rpc::ActorCheckpointReply r;
    *r.mutable_status() = ToProto(st);
    r.set_found(found);
    r.set_state(std::move(state));
    Clients::Reply(*c, rpc::ACTOR_CHECKPOINT, req, r);
  };
  if (!m.save()) {
    gcs_->GetCheckpoint(m.actor_id(), [reply](Result<std::string> r) {
      if (r.ok()) return reply(Status::OK(), true, std::move(r).value());
      reply(r.status().code() == StatusCode::kNotFound ? Status::OK() : r.status(), false, "");
    });
    return;
  }
  if (m.state().size() > checkpoint_max_bytes_) {
    return reply(Status::InvalidArgument("the checkpoint is " + std::to_string(m.state().size() >> 20) +
                                         " MiB, more than the " + std::to_string(checkpoint_max_bytes_ >> 20) +
                                         " MiB kept (the raylet's --checkpoint-max-bytes)"),
                 false, "");
  }
  gcs_->PutCheckpoint(m.actor_id(), m.state(), [reply](Status st) { reply(st, false, ""); });
}

}  // namespace phalanx::scheduler
