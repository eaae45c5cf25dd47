// PlacementService: placement groups on this raylet. It owns the
// PlacementGroups (the groups this node coordinates and its side of others',
// scheduler/placement_groups.h) and answers their messages from clients and
// from other raylets; the task and actor managers find bundles through
// groups() (GroupPlacement). Not thread-safe; the raylet's loop.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include <boost/asio.hpp>

#include "core/peer_channel.h"
#include "core/proto/phalanx.pb.h"
#include "gcs/gcs_client.h"
#include "objectstore/object_table.h"
#include "scheduler/clients.h"
#include "scheduler/placement_groups.h"
#include "scheduler/remote_nodes.h"
#include "scheduler/resource_ledger.h"
#include "scheduler/router.h"

namespace phalanx::scheduler {

class PlacementService final : public ClientWatcher, private GroupHost {
 public:
  // Every collaborator is owned by the raylet and outlives this; none is used before the first message.
  // `peers` and `cluster`: the other raylets (the PeerManager); `tasks`, `actors`: this node's.
  PlacementService(boost::asio::io_context& io, std::string node_id, ResourceLedger* ledger, PeerChannel* peers,
                   ClusterResources* cluster, GcsClient* gcs, objectstore::ObjectTable* objects, GroupTasks* tasks,
                   GroupActors* actors, NodeAnnouncer* node);

  GroupPlacement* groups() { return &pgs_; }
  const PlacementGroups& table() const { return pgs_; }  // (the metrics page counts them)
  // Client messages.
  // Its client messages (create, remove, get) and peer messages (bundle operations, removal).
  void AddRoutes(Router& router);
  void HandleCreate(Client& c, rpc::CreatePlacementGroup m);
  void HandleRemove(const std::shared_ptr<Client>& c, uint64_t req, const rpc::PlacementGroupRequest& m);
  void HandleGet(const std::shared_ptr<Client>& c, uint64_t req, const rpc::PlacementGroupRequest& m);
  // BUNDLE_PREPARE / COMMIT / RETURN and PG_REMOVE from other nodes.
  void HandlePeer(rpc::MessageType type, const std::string& body, const PeerReply& reply);
  // ClientWatcher: the groups a client created (not detached) are removed when it exits, as in Ray.
  void OnClientGone(Client& c, const std::string&) override {
    if (c.registered && !stopped_) pgs_.OnClientGone(c.client_id);
  }
  // A node died: the bundles it held are placed again.
  void OnNodeDead(const std::string& node_id) { pgs_.OnNodeDead(node_id); }
  // The raylet is stopping: changes no longer reach the task queue or the GCS.
  void Stop() { stopped_ = true; }

 private:
  // GroupHost: what the PlacementGroups do outside themselves.
  std::vector<std::pair<std::string, ResourceSet>> Others() override { return cluster_->FreeElsewhere(); }
  void SendBundleOp(const std::string& node, rpc::MessageType type, const rpc::BundleOp& op,
                    std::function<void(const Status&)> done) override;
  // A group changes state several times in one turn of the loop (created,
  // placed, removed): only its last state of the turn goes to the GCS.
  void Publish(const rpc::PlacementGroupInfo& info) override { QueueWrite(info.pg_id(), &info); }
  void Forget(const std::string& pg_id) override { QueueWrite(pg_id, nullptr); }
  void Fetch(const std::string& pg_id, std::function<void(Result<rpc::PlacementGroupInfo>)> cb) override {
    gcs_->GetPlacementGroup(pg_id, std::move(cb));
  }
  void Created(const rpc::PlacementGroupInfo& info) override;
  void Removed(const rpc::PlacementGroupInfo& info, const std::string& why) override;
  void ReturnedHere(const std::string& pg_id) override;
  void After(std::chrono::milliseconds delay, std::function<void()> fn) override;
  void Changed() override;
  // Placement group states for the GCS, the last of each group in this turn
  // of the loop (nullopt: forget it), written at the end of the turn.
  void QueueWrite(const std::string& pg_id, const rpc::PlacementGroupInfo* info);

  boost::asio::io_context& io_;
  std::string node_id_;
  ResourceLedger* ledger_;
  PeerChannel* peers_;
  ClusterResources* cluster_;
  GcsClient* gcs_;
  objectstore::ObjectTable* objects_;
  GroupTasks* tasks_;
  GroupActors* actors_;
  NodeAnnouncer* node_;
  std::unordered_map<std::string, std::optional<rpc::PlacementGroupInfo>> writes_;
  bool flush_posted_ = false;
  std::unordered_map<std::string, std::string> ready_values_;  // pg id -> its ready object's value, until placed
  bool stopped_ = false;
  PlacementGroups pgs_;  // (last: it is given this as its GroupHost)
};

}  // namespace phalanx::scheduler
