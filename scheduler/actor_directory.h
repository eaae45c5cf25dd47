// ActorDirectory: the cluster-wide record of actors, as the ActorManager
// asks it (given at construction): named actors' names (unique across the
// cluster: claimed before the actor is placed, released when it dies), where
// an actor created elsewhere lives, and each actor's state as it changes.
// GcsActorDirectory keeps it in the GCS; tests/cpp/actor_manager_test.cc
// fakes it. Not thread-safe; the raylet's loop.
#pragma once

#include <functional>
#include <string>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "gcs/gcs_client.h"

namespace phalanx::scheduler {

class ActorDirectory {
 public:
  virtual ~ActorDirectory() = default;
  // `cb("")` when `actor_id` has `name` cluster-wide, else the id of the actor
  // that has it (`stale`: an owner found dead, whose name is taken over).
  virtual void ClaimName(const std::string& name, const std::string& actor_id, const std::string& stale,
                         std::function<void(Result<std::string>)> cb) = 0;
  virtual void ReleaseName(const std::string& name, const std::string& actor_id) = 0;
  // The record of an actor (where it lives, its state); NotFound if none.
  virtual void Locate(const std::string& actor_id, std::function<void(Result<rpc::ActorInfo>)> cb) = 0;
  // The actor's state changed (an actor dead for good: its checkpoint goes too).
  virtual void Publish(const rpc::ActorInfo& info) = 0;
};

class GcsActorDirectory final : public ActorDirectory {
 public:
  explicit GcsActorDirectory(GcsClient* gcs) : gcs_(gcs) {}
  void ClaimName(const std::string& name, const std::string& actor_id, const std::string& stale,
                 std::function<void(Result<std::string>)> cb) override {
    gcs_->ClaimActorName(name, actor_id, stale, std::move(cb));
  }
  void ReleaseName(const std::string& name, const std::string& actor_id) override {
    gcs_->ReleaseActorName(name, actor_id);
  }
  void Locate(const std::string& actor_id, std::function<void(Result<rpc::ActorInfo>)> cb) override {
    gcs_->GetActor(actor_id, std::move(cb));
  }
  void Publish(const rpc::ActorInfo& info) override {
    gcs_->PutActor(info);
    if (info.state() == rpc::ACTOR_DEAD) gcs_->DeleteCheckpoint(info.actor_id());  // dead for good: its state goes
  }

 private:
  GcsClient* gcs_;
};

}  // namespace phalanx::scheduler
