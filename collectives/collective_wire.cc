#include "collectives/collective_wire.h"

#include "core/ids.h"
#include "core/message_limits.h"
#include "core/status_proto.h"

namespace phalanx::collectives {

CollectiveWire::CollectiveWire(std::string self, ReduceSteps* steps, objectstore::ObjectTable* objects,
                               PeerChannel* peers, objectstore::RefLender* holds,
                               const objectstore::ObjectTransfer* links, uint64_t chunk_bytes)
    : self_(std::move(self)),
      steps_(steps),
      objects_(objects),
      peers_(peers),
      holds_(holds),
      links_(links),
      chunk_bytes_(chunk_bytes) {}

void CollectiveWire::CallForStatus(const std::string& node, rpc::MessageType type,
                                   const google::protobuf::Message& m, int64_t timeout_ms,
                                   std::function<void(const Status&)> done) {
  peers_->Call(node, type, m, timeout_ms, [done](Result<std::string> body) {
    if (!body.ok()) return done(body.status());
    rpc::Status s;
    if (!s.ParseFromString(body.value())) return done(Status::Unavailable("malformed reply from a collective step"));
    done(FromProto(s));
  });
}

void CollectiveWire::SendStep(const std::string& node, const rpc::ReduceStep& m,
                              std::function<void(const Status&)> started) {
  if (node == self_) return steps_->Run(m, started, nullptr);
  CallForStatus(node, rpc::REDUCE_STEP, m, kStepTimeoutMs, started);
}

void CollectiveWire::Drop(const std::string& node, const std::vector<std::string>& ids) {
  if (node == self_) return steps_->Drop(ids);
  rpc::ObjectIds m;
  for (const auto& id : ids) m.add_object_ids(id);
  peers_->Call(node, rpc::DROP_PARTIALS, m, kDropTimeoutMs, nullptr);
}

void CollectiveWire::Probe(const std::string& node, std::function<void(bool)> done) {
  if (node == self_) return done(true);
  // An empty drop: answered by any live raylet, refused or timed out otherwise.
  peers_->Call(node, rpc::DROP_PARTIALS, rpc::ObjectIds(), kProbeTimeoutMs,
               [done](Result<std::string> r) { done(r.ok()); });
}

void CollectiveWire::Assemble(const std::string& node, const rpc::AssembleSlices& m,
                              std::function<void(const Status&)> done) {
  if (node == self_) return steps_->Assemble(m, done);
  CallForStatus(node, rpc::ASSEMBLE_SLICES, m, kAssembleTimeoutMs, done);
}

void CollectiveWire::Lose(const std::string& node, const std::vector<std::string>& ids, StatusCode code,
                          const std::string& why) {
  rpc::LostObjects m;
  for (const auto& id : ids) m.add_object_ids(id);
  m.set_code(static_cast<int>(code));
  m.set_why(why);
  peers_->Call(node, rpc::LOSE_OBJECTS, m, kDropTimeoutMs, nullptr);
}

void CollectiveWire::Handle(rpc::MessageType type, const std::string& body,
                            std::function<void(const Status&)> reply) {
  switch (type) {
    case rpc::REDUCE_STEP: {
      rpc::ReduceStep m;
      // (prev_id is empty for the first link of a slice, input_id for a plain copy.)
      if (!m.ParseFromString(body) || !IsObjectId(m.out_id()) || (!m.prev_id().empty() && !IsObjectId(m.prev_id())) ||
          (!m.input_id().empty() && !IsObjectId(m.input_id()))) {
        return reply(Status::InvalidArgument("malformed reduce step"));
      }
      return steps_->Run(m, reply, nullptr);
    }
    case rpc::ASSEMBLE_SLICES: {
      rpc::AssembleSlices m;
      if (!m.ParseFromString(body) || !IsObjectId(m.out_id()) || !AllObjectIds(m.slice_ids())) {
        return reply(Status::InvalidArgument("malformed allreduce assembly"));
      }
      std::string out = m.out_id(), caller = m.reduce_node();
      return steps_->Assemble(m, [this, reply, out, caller](const Status& st) {
        if (st.ok()) holds_->Lend(caller, out);  // until the caller releases it
        reply(st);
      });
    }
    case rpc::LOSE_OBJECTS: {
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
        if (objects_->Contains(id)) objects_->MarkLost(id, code, m.why());
      }
      return reply(Status::OK());
    }
    case rpc::DROP_PARTIALS: {
      rpc::ObjectIds m;
      if (!m.ParseFromString(body) || !AllObjectIds(m.object_ids())) {
        return reply(Status::InvalidArgument("malformed drop"));
      }
      steps_->Drop({m.object_ids().begin(), m.object_ids().end()});
      return reply(Status::OK());
    }
    default:
      return reply(Status::InvalidArgument("not a collective message"));
  }
}

}  // namespace phalanx::collectives
