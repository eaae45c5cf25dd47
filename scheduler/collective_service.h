// CollectiveService: the raylet's part in collectives
// (collectives/reduce_manager.h, collectives/allreduce.h,
// collectives/reduce_step.h, scheduler/rendezvous.h): its clients' reduces,
// allreduces, rendezvous and located refs. It owns the reduce managers, the
// reduce steps placed here and the CollectiveWire, whose messages go to and
// come from other nodes through the Router (AddRoutes). Not thread-safe;
// the raylet's loop.
#pragma once

#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "collectives/allreduce.h"
#include "collectives/collective_wire.h"
#include "collectives/reduce_manager.h"
#include "collectives/reduce_step.h"
#include "core/proto/phalanx.pb.h"
#include "gcs/gcs_client.h"
#include "objectstore/object_manager.h"
#include "scheduler/clients.h"
#include "core/peer_channel.h"
#include "scheduler/rendezvous.h"
#include "scheduler/router.h"

namespace phalanx::scheduler {

class CollectiveService final : public ClientWatcher {
 public:
  // `objects`: the node's object layer; `inline_threshold`: results at most this big stay inline.
  // Every collaborator is owned by the raylet and outlives this.
  CollectiveService(boost::asio::io_context& io, std::string node_id, objectstore::ObjectManager* objects,
                    uint64_t inline_threshold, PeerChannel* peers, GcsClient* gcs);
  ~CollectiveService();

  // Client messages.
  // Its client messages (reduce, rendezvous, locate, reduced inputs) and peer messages (the wire's).
  void AddRoutes(Router& router);
  void HandleReduce(Client& c, const rpc::ReduceObjects& m);
  void HandleReducedInputs(const std::shared_ptr<Client>& c, uint64_t request_id, const std::string& out_id);
  void HandleRendezvous(const std::shared_ptr<Client>& c, uint64_t request_id, const rpc::Rendezvous& m);
  // A node was declared dead: its reduce steps and rendezvous here.
  void OnNodeDead(const std::string& node);
  // ClientWatcher: a client that made a rendezvous exited (`why`): the other ranks hear of it.
  void OnClientGone(Client& c, const std::string& why) override {
    if (c.met) rendezvous_.ClientGone(c.client_id, why);
  }
  // An object freed here: its reduce record goes.
  void OnObjectFreed(const std::string& id) { reduces_.Forget(id); }
  // Fails what is in progress (`why`).
  void Stop(const std::string& why);

  const collectives::ReduceSteps& steps() const { return steps_; }
  const collectives::ReduceManager& reduces() const { return reduces_; }
  const collectives::Allreduces& allreduces() const { return allreduces_; }

 private:
  std::string node_id_;
  objectstore::ObjectManager* om_;
  objectstore::ObjectTable& objects_;  // om_'s
  collectives::ReduceSteps steps_;     // links of reduce chains placed on this node
  std::unique_ptr<collectives::CollectiveWire> wire_;  // the collectives' messages to and from peers
  collectives::ReduceManager reduces_;
  collectives::Allreduces allreduces_;
  Rendezvous rendezvous_;  // static collective groups meeting through the GCS
};

}  // namespace phalanx::scheduler
