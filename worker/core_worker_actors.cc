// The core worker's requests about actors to its raylet: a named actor's
// lookup, a kill, and an actor's own checkpoints (docs/fault-tolerance.md).
// Split from core_worker.cc; the same class (worker/core_worker.h).
#include "core/status_proto.h"
#include "worker/core_worker.h"

namespace phalanx {

Result<rpc::GetActorReply> CoreWorker::GetActor(const std::string& name, int64_t timeout_ms) {
  rpc::GetActor m;
  m.set_name(name);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::GetActorReply>(rpc::GET_ACTOR, m, timeout_ms, "actor"));
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  return r;
}

Status CoreWorker::KillActor(const std::string& actor_id, bool no_restart, int64_t timeout_ms) {
  rpc::KillActor m;
  m.set_actor_id(actor_id);
  m.set_no_restart(no_restart);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::KillActorReply>(rpc::KILL_ACTOR, m, timeout_ms, "kill"));
  return FromProto(r.status());
}

Result<rpc::ActorCheckpointReply> CoreWorker::ActorCheckpoint(const std::string& actor_id, bool save,
                                                              std::string state, int64_t timeout_ms) {
  rpc::ActorCheckpoint m;
  m.set_actor_id(actor_id);
  m.set_save(save);
  m.set_state(std::move(state));
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::ActorCheckpointReply>(rpc::ACTOR_CHECKPOINT, m, timeout_ms,
                                                                      "actor checkpoint"));
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  return r;
}

}  // namespace phalanx
