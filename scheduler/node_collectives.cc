// The raylet's part in collectives (collectives/reduce_manager.h,
// collectives/allreduce.h, collectives/reduce_step.h): its clients' reduces
// and allreduces, and the links of reduce chains and allreduce assemblies:
// those other nodes place here arrive through the PeerManager; those this
// node places elsewhere leave through it.
#include "core/message_limits.h"
#include "core/status_proto.h"
#include "scheduler/node_manager.h"

namespace phalanx::scheduler {

namespace {
// Sends a collective request to another node; `done` gets the Status it answers with.
void CallForStatus(PeerManager& peers, const std::string& node, rpc::MessageType type,
                   const google::protobuf::Message& m, int64_t timeout_ms, std::function<void(const Status&)> done) {
  peers.CallNode(node, type, m, timeout_ms, [done](Result<std::string> body) {
    if (!body.ok()) return done(body.status());
    rpc::Status s;
    if (!s.ParseFromString(body.value())) return done(Status::Unavailable("malformed reply from a collective step"));
    done(FromProto(s));
  });
}
}  // namespace

void NodeManager::SetUpCollectives() {
  collectives::ChainHooks hooks;
  hooks.steps = &steps_;
  hooks.self = node_id_;
  hooks.chunk_bytes = peers_.transfer().options().chunk_bytes;
  hooks.send_step = [this](const std::string& node, const rpc::ReduceStep& m,
                           std::function<void(const Status&)> started) {
    if (node == node_id_) return steps_.Run(m, started, nullptr);
    CallForStatus(peers_, node, rpc::REDUCE_STEP, m, 30000, started);
  };
  hooks.drop = [this](const std::string& node, const std::vector<std::string>& ids) {
    if (node == node_id_) return steps_.Drop(ids);
    rpc::ObjectIds m;
    for (const auto& id : ids) m.add_object_ids(id);
    peers_.CallNode(node, rpc::DROP_PARTIALS, m, 5000, nullptr);
  };
  hooks.link = [this](const std::string& node) {
    auto l = peers_.transfer().LinkTo(node);
    return std::make_pair(l.bytes_per_s, l.rtt_s);
  };
  hooks.probe = [this](const std::string& node, std::function<void(bool)> done) {
    if (node == node_id_) return done(true);
    // An empty drop: answered by any live raylet, refused or timed out otherwise.
    peers_.CallNode(node, rpc::DROP_PARTIALS, rpc::ObjectIds(), 3000,
                    [done](Result<std::string> r) { done(r.ok()); });
  };
  hooks.assemble = [this](const std::string& node, const rpc::AssembleSlices& m,
                          std::function<void(const Status&)> done) {
    if (node == node_id_) return steps_.Assemble(m, done);
    // Answered once the result is whole there: as long as a transfer may take.
    CallForStatus(peers_, node, rpc::ASSEMBLE_SLICES, m, 600000, done);
  };
  hooks.lose = [this](const std::string& node, const std::vector<std::string>& ids, StatusCode code,
                      const std::string& why) {
    rpc::LostObjects m;
    for (const auto& id : ids) m.add_object_ids(id);
    m.set_code(static_cast<int>(code));
    m.set_why(why);
    peers_.CallNode(node, rpc::LOSE_OBJECTS, m, 5000, nullptr);
  };
  hooks.release = [this](const std::string& node, const std::vector<std::string>& ids) { peers_.Release(node, ids); };
  allreduces_.SetChain(hooks);
  reduces_.SetChain(std::move(hooks));
  peers_.SetDeadNodeHandler([this](const std::string& node) {
    steps_.DropFrom(node);
    rendezvous_.NodeDied(node);
    if (pgs_) pgs_->OnNodeDead(node);
  });
  peers_.SetCollectiveHandler(
      [this](rpc::MessageType type, const std::string& body, std::function<void(const Status&)> reply) {
        if (type == rpc::REDUCE_STEP) {
          rpc::ReduceStep m;
          // (prev_id is empty for the first link of a slice, input_id for a plain copy.)
          if (!m.ParseFromString(body) || !IsObjectId(m.out_id()) ||
              (!m.prev_id().empty() && !IsObjectId(m.prev_id())) ||
              (!m.input_id().empty() && !IsObjectId(m.input_id()))) {
            return reply(Status::InvalidArgument("malformed reduce step"));
          }
          return steps_.Run(m, reply, nullptr);
        }
        if (type == rpc::ASSEMBLE_SLICES) {
          rpc::AssembleSlices m;
          if (!m.ParseFromString(body) || !IsObjectId(m.out_id()) || !AllObjectIds(m.slice_ids())) {
            return reply(Status::InvalidArgument("malformed allreduce assembly"));
          }
          std::string out = m.out_id(), caller = m.reduce_node();
          return steps_.Assemble(m, [this, reply, out, caller](const Status& st) {
            if (st.ok()) peers_.HoldFor(caller, out);  // until the caller releases it
            reply(st);
          });
        }
        if (type == rpc::LOSE_OBJECTS) {
          rpc::LostObjects m;
          if (!m.ParseFromString(body) || !AllObjectIds(m.object_ids())) {
            return reply(Status::InvalidArgument("malformed lost objects"));
          }
          // (A code this process does not know becomes ObjectLost.)
          StatusCode code = m.code() > 0 && m.code() <= static_cast<int>(StatusCode::kCollectiveFailed)
                                ? static_cast<StatusCode>(m.code())
                                : StatusCode::kObjectLost;
          // Only results someone here still waits for (a static group's rank holds its own).
          for (const auto& id : m.object_ids()) {
            if (objects_.Contains(id)) objects_.MarkLost(id, code, m.why());
          }
          return reply(Status::OK());
        }
        rpc::ObjectIds m;
        if (!m.ParseFromString(body) || !AllObjectIds(m.object_ids())) {
          return reply(Status::InvalidArgument("malformed drop"));
        }
        steps_.Drop({m.object_ids().begin(), m.object_ids().end()});
        reply(Status::OK());
      });
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
