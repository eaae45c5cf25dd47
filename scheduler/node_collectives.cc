// The raylet's part in collectives (collectives/reduce_manager.h,
// collectives/allreduce.h, collectives/reduce_step.h): its clients' reduces,
// allreduces, rendezvous and located refs. The links of reduce chains and
// allreduce assemblies go to and come from other nodes through the
// CollectiveWire (collectives/collective_wire.h) over the PeerManager.
#include "core/status_proto.h"
#include "scheduler/node_manager.h"

namespace phalanx::scheduler {

namespace {
// The collectives' view of the peer layer and the object layer.
class PeerLinks : public collectives::CollectivePeers {
 public:
  PeerLinks(PeerManager* peers, objectstore::ObjectManager* objects) : peers_(peers), objects_(objects) {}
  void Call(const std::string& node, rpc::MessageType type, const google::protobuf::Message& m, int64_t timeout_ms,
            std::function<void(Result<std::string>)> done) override {
    peers_->CallNode(node, type, m, timeout_ms, std::move(done));
  }
  void Release(const std::string& node, const std::vector<std::string>& ids) override {
    objects_->Release(node, ids);
  }
  void HoldFor(const std::string& node, const std::string& id) override { objects_->HoldFor(node, id); }
  std::pair<double, double> Link(const std::string& node) override {
    auto l = objects_->transfer().LinkTo(node);
    return {l.bytes_per_s, l.rtt_s};
  }

 private:
  PeerManager* peers_;
  objectstore::ObjectManager* objects_;
};
}  // namespace

std::unique_ptr<collectives::CollectivePeers> NodeManager::LinksOver(PeerManager* peers,
                                                                     objectstore::ObjectManager* objects) {
  return std::make_unique<PeerLinks>(peers, objects);
}

void NodeManager::OnNodeDead(const std::string& node) {
  steps_.DropFrom(node);
  rendezvous_.NodeDied(node);
  placement_.OnNodeDead(node);
}

void NodeManager::HandleReduce(Client& c, const rpc::ReduceObjects& m) {
  if (m.out_ids_size() > 0) {  // allreduce: a result per input
    for (const auto& id : m.out_ids()) Hold(c, id);
    Status s = allreduces_.Start(m);
    if (!s.ok()) {
      for (const auto& id : m.out_ids()) objects_.MarkLost(id, s.code(), "allreduce refused: " + s.message());
    }
    return;
  }
  Hold(c, m.out_id());
  Status s = reduces_.Start(m);
  // A request the client checked should not fail here: if it does, its get says why.
  if (!s.ok()) objects_.MarkLost(m.out_id(), s.code(), "reduce refused: " + s.message());
}

void NodeManager::HandleRendezvous(const std::shared_ptr<Client>& c, uint64_t request_id, const rpc::Rendezvous& m) {
  c->met = true;
  std::weak_ptr<Client> weak = c;
  rendezvous_.Arrive(m, [this, weak, request_id](Result<std::vector<std::string>> r) {
    auto cl = weak.lock();
    if (!cl) return;
    rpc::RendezvousReply reply;
    *reply.mutable_status() = ToProto(r.status());
    if (r.ok()) {
      for (auto& p : r.value()) reply.add_payloads(std::move(p));
    }
    Reply(*cl, rpc::RENDEZVOUS, request_id, reply);
  });
}

void NodeManager::HandleLocate(Client& c, const rpc::LocateObjects& m) {
  for (int i = 0; i < m.object_ids_size(); ++i) {
    Hold(c, m.object_ids(i));  // until the client lets go (UPDATE_REFS)
    if (m.node_ids(i) != node_id_) objects_.SetRemote(m.object_ids(i), m.node_ids(i), m.sizes(i));
  }
}

void NodeManager::HandleReducedInputs(const std::shared_ptr<Client>& c, uint64_t request_id,
                                      const std::string& out_id) {
  std::weak_ptr<Client> weak = c;
  reduces_.InputsOf(out_id, [this, weak, request_id](Result<std::vector<std::string>> r) {
    auto cl = weak.lock();
    if (!cl) return;
    rpc::ReducedInputsReply reply;
    *reply.mutable_status() = ToProto(r.status());
    if (r.ok()) {
      for (const auto& id : r.value()) reply.add_input_ids(id);
    }
    Reply(*cl, rpc::REDUCED_INPUTS, request_id, reply);
  });
}

}  // namespace phalanx::scheduler
