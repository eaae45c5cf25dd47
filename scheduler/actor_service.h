// ActorService: the raylet's answers to its clients about actors: lookups
// by name (here, else the GCS), where to send an actor's calls directly,
// kills (on another node: answered once that node did it), and an actor's
// checkpoint kept in the GCS (read or written by the actor's own worker
// only). The actors themselves are the ActorManager's; this is their door.
// As a ClientWatcher it tells the actors (ActorRegistry) of a client's exit (the
// actors it owns end with it). Not thread-safe; the raylet's loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gcs/gcs_client.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/clients.h"
#include "scheduler/router.h"
#include "scheduler/task_table.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

class ActorService final : public ClientWatcher {
 public:
  // `checkpoint_max_bytes`: the largest checkpoint kept.
  // Every collaborator is owned by the raylet and outlives this; none is used before the first message.
  ActorService(ActorRegistry* actors, TaskTable* tasks, GcsClient* gcs, uint64_t checkpoint_max_bytes);

  // Its client messages: actor lookup, actor route, kill, checkpoint.
  void AddRoutes(Router& router);
  void HandleGetActor(const std::shared_ptr<Client>& c, uint64_t req, const std::string& name);
  void HandleRoute(const std::shared_ptr<Client>& c, uint64_t req, const rpc::ActorRoute& m);
  void HandleKill(const std::shared_ptr<Client>& c, uint64_t req, const rpc::KillActor& m);
  void HandleCheckpoint(const std::shared_ptr<Client>& c, uint64_t req, rpc::ActorCheckpoint m);
  // ClientWatcher
  void OnClientGone(Client& c, const std::string&) override { actors_->OnClientGone(c.client_id); }

 private:
  void LookUpActor(const std::shared_ptr<Client>& c, uint64_t req, const std::string& name);

  ActorRegistry* actors_;
  TaskTable* tasks_;
  GcsClient* gcs_;
  uint64_t checkpoint_max_bytes_;
};

}  // namespace phalanx::scheduler
