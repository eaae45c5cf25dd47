#include "scheduler/collective_service.h"

#include "core/message_limits.h"
#include "core/ids.h"
#include "core/status_proto.h"

namespace phalanx::scheduler {

CollectiveService::CollectiveService(boost::asio::io_context& io, std::string node_id,
                                     objectstore::ObjectManager* objects, uint64_t inline_threshold,
                                     PeerChannel* peers, GcsClient* gcs)
    : node_id_(std::move(node_id)),
      om_(objects),
      objects_(objects->table()),
      steps_(io, &objects_, &objects->store(), &objects->transfer(), node_id_),
      wire_(std::make_unique<collectives::CollectiveWire>(node_id_, &steps_, &objects_, peers, objects->lender(),
                                                          &objects->transfer(),
                                                          objects->transfer().options().chunk_bytes)),
      reduces_(io, &objects_, &objects->store(), inline_threshold, wire_.get(),
               [objects](const std::string& id, uint64_t size) { objects->ListInDirectory(id, size); }),
      allreduces_(io, &objects_, &objects->store(), &reduces_, wire_.get(),
                  [objects](const std::string& id, uint64_t size) { objects->ListInDirectory(id, size); }),
      rendezvous_(io, gcs) {}

CollectiveService::~CollectiveService() = default;

void CollectiveService::OnNodeDead(const std::string& node) {
  steps_.DropFrom(node);
  rendezvous_.NodeDied(node);
}

void CollectiveService::Stop(const std::string& why) {
  allreduces_.Stop(why);
  reduces_.Stop(why);
}

namespace {
// `c` holds `id` (until it lets go: UPDATE_REFS).
void Hold(Client& c, objectstore::ObjectTable& objects, const std::string& id) {
  if (c.holds.insert(id).second) objects.AddRef(id);
}
}  // namespace

void CollectiveService::HandleReduce(Client& c, const rpc::ReduceObjects& m) {
  if (m.out_ids_size() > 0) {  // allreduce: a result per input
    for (const auto& id : m.out_ids()) Hold(c, objects_, id);
    Status s = allreduces_.Start(m);
    if (!s.ok()) {
      for (const auto& id : m.out_ids()) objects_.MarkLost(id, s.code(), "allreduce refused: " + s.message());
    }
    return;
  }
  Hold(c, objects_, m.out_id());
  Status s = reduces_.Start(m);
  // A request the client checked should not fail here: if it does, its get says why.
  if (!s.ok()) objects_.MarkLost(m.out_id(), s.code(), "reduce refused: " + s.message());
}

void CollectiveService::HandleRendezvous(const std::shared_ptr<Client>& c, uint64_t request_id, const rpc::Rendezvous& m) {
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
    Clients::Reply(*cl, rpc::RENDEZVOUS, request_id, reply);
  });
}

void CollectiveService::HandleReducedInputs(const std::shared_ptr<Client>& c, uint64_t request_id,
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
    Clients::Reply(*cl, rpc::REDUCED_INPUTS, request_id, reply);
  });
}

void CollectiveService::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  router.OnClient(rpc::REDUCE_OBJECTS, "reduce", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::ReduceObjects m;
    if (!ParseBody(&m, b, n) || (!IsObjectId(m.out_id()) && m.out_ids_size() == 0) || !AllObjectIds(m.input_ids()) ||
        !AllObjectIds(m.out_ids())) {
      return false;
    }
    HandleReduce(*c, m);
    return true;
  });
  router.OnClient(rpc::RENDEZVOUS, "rendezvous", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::Rendezvous m;
    if (!ParseBody(&m, b, n)) return false;
    HandleRendezvous(c, req, m);
    return true;
  });
  router.OnClient(rpc::REDUCED_INPUTS, "reduced inputs", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::ObjectIds m;
    if (!ParseBody(&m, b, n) || m.object_ids_size() != 1 || !IsObjectId(m.object_ids(0))) return false;
    HandleReducedInputs(c, req, m.object_ids(0));
    return true;
  });
  // The collective wire's messages from other raylets, answered with a Status.
  for (rpc::MessageType type : {rpc::REDUCE_STEP, rpc::DROP_PARTIALS, rpc::ASSEMBLE_SLICES, rpc::LOSE_OBJECTS}) {
    router.OnPeer(type, "collective step", [this, type](const char* b, size_t n, const PeerReply& reply) {
      wire_->Handle(type, std::string(b, n), [reply](const Status& st) { reply(ToProto(st)); });
      return true;
    });
  }
}

}  // namespace phalanx::scheduler
