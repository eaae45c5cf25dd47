// PlacementService: the raylet's side of placement groups: the client
// messages (PG_CREATE, PG_REMOVE, PG_GET), the bundle messages from
// coordinators (BUNDLE_PREPARE / COMMIT / RETURN, PG_REMOVE), and the
// groups' effects on this node (the GCS record, the ready object, the actors
// and tasks of a removed group). The logic is in scheduler/placement_groups.cc.
#include "scheduler/placement_service.h"

#include <unordered_set>

#include <boost/asio/steady_timer.hpp>

#include "core/ids.h"
#include "core/logging.h"
#include "core/status_proto.h"
#include "core/value_format.h"

namespace phalanx::scheduler {

namespace {
// The value of a group's ready object: Python's True (a pickle stream in the
// value layout of core/value_format.h, no buffers).
std::string TrueValue() {
  const std::string meta("\x80\x02\x88.", 4);  // pickle protocol 2: True
  std::string v(value_format::HeaderSize(0), '\0');
  uint32_t head[4] = {value_format::kMagic, value_format::kKindValue, 0, 0};
  uint64_t meta_len = meta.size();
  std::memcpy(v.data(), head, sizeof(head));
  std::memcpy(v.data() + sizeof(head), &meta_len, sizeof(meta_len));
  return v + meta;
}

constexpr int64_t kRemoteTimeoutMs = 10000;
}  // namespace

PlacementService::PlacementService(boost::asio::io_context& io, std::string node_id, ResourceLedger* ledger,
                                   PeerChannel* peers, ClusterResources* cluster, GcsClient* gcs,
                                   objectstore::ObjectTable* objects, GroupTasks* tasks, GroupActors* actors,
                                   NodeAnnouncer* node)
    : io_(io),
      node_id_(std::move(node_id)),
      ledger_(ledger),
      peers_(peers),
      cluster_(cluster),
      gcs_(gcs),
      objects_(objects),
      tasks_(tasks),
      actors_(actors),
      node_(node),
      pgs_(node_id_, ledger_, this) {}

void PlacementService::QueueWrite(const std::string& pg_id, const rpc::PlacementGroupInfo* info) {
  writes_[pg_id] = info ? std::optional<rpc::PlacementGroupInfo>(*info) : std::nullopt;
  if (flush_posted_) return;
  flush_posted_ = true;
  boost::asio::post(io_, [this] {
    flush_posted_ = false;
    auto writes = std::move(writes_);
    writes_.clear();
    for (auto& [id, w] : writes) {
      if (w) {
        gcs_->PutPlacementGroup(*w);
      } else {
        gcs_->DeletePlacementGroup(id);
      }
    }
  });
}

void PlacementService::SendBundleOp(const std::string& node, rpc::MessageType type, const rpc::BundleOp& op,
                                    std::function<void(const Status&)> done) {
  peers_->Call(node, type, op, kRemoteTimeoutMs, [done](Result<std::string> r) {
    if (!done) return;
    if (!r.ok()) return done(r.status());
    rpc::Status st;
    if (!st.ParseFromString(r.value())) return done(Status::Internal("malformed answer to a bundle operation"));
    done(FromProto(st));
  });
}

void PlacementService::Created(const rpc::PlacementGroupInfo& info) {
  auto value = ready_values_.find(info.pg_id());
  std::string ready = value == ready_values_.end() ? TrueValue() : std::move(value->second);
  if (value != ready_values_.end()) ready_values_.erase(value);
  objects_->PutInline(MakeObjectId(info.pg_id(), 1), std::move(ready), {});
}

void PlacementService::Removed(const rpc::PlacementGroupInfo& info, const std::string& why) {
  ready_values_.erase(info.pg_id());
  std::string id = MakeObjectId(info.pg_id(), 1);
  if (!objects_->IsReady(id)) {
    objects_->MarkLost(id, StatusCode::kInfeasible,
                       "placement group " + ToHex(info.pg_id()).substr(0, 12) + " will never be ready: " + why);
  }
}

void PlacementService::ReturnedHere(const std::string& pg) {
  // (Ray's tests match "placement group was removed")
  std::string why = "its placement group was removed (" + ToHex(pg).substr(0, 12) + ")";
  actors_->KillGroup(pg, "the actor died because " + why);  // (Ray's "actor died")
  tasks_->FailGroup(pg, why);
}

void PlacementService::After(std::chrono::milliseconds delay, std::function<void()> fn) {
  auto t = std::make_shared<boost::asio::steady_timer>(io_, delay);
  t->async_wait([t, fn = std::move(fn)](const boost::system::error_code& ec) {
    if (!ec) fn();
  });
}

void PlacementService::Changed() {
  if (stopped_) return;
  tasks_->Redispatch();
  node_->AnnounceSoon();  // others see the bundles' resources now, not at the next heartbeat
}

void PlacementService::HandlePeer(rpc::MessageType type, const std::string& body, const PeerReply& reply) {
  if (type == rpc::PG_REMOVE) {
    rpc::PlacementGroupRequest m;
    if (!m.ParseFromString(body)) return reply(ToProto(Status::InvalidArgument("malformed placement group request")));
    return reply(ToProto(pgs_.Remove(m.pg_id())));
  }
  rpc::BundleOp op;
  if (!op.ParseFromString(body)) return reply(ToProto(Status::InvalidArgument("malformed bundle operation")));
  reply(ToProto(pgs_.OnBundleOp(type, op)));
}

void PlacementService::HandleCreate(Client& c, rpc::CreatePlacementGroup m) {
  rpc::PlacementGroupInfo& info = *m.mutable_info();
  if (info.pg_id().size() != kTaskIdSize) {
    c.conn->Send(rpc::CLIENT_WARNING, 0, 0, ToProto(Status::InvalidArgument("a placement group id has the wrong size")));
    return;
  }
  std::string ready = MakeObjectId(info.pg_id(), 1);
  if (c.holds.insert(ready).second) objects_->AddRef(ready);  // (the client holds the ready ref from the start, as a task's return)
  if (info.ready_value().size() > 64 * 1024) {
    objects_->MarkLost(ready, StatusCode::kInvalidArgument, "a placement group's ready value is over 64 KiB");
    return;
  }
  // (kept here until the group is placed, not in its GCS record)
  if (!info.ready_value().empty()) ready_values_[info.pg_id()] = std::move(*info.mutable_ready_value());
  info.clear_ready_value();
  info.set_creator_id(c.client_id);
  std::string pg_id = info.pg_id();
  Status st = pgs_.Create(std::move(info));
  if (!st.ok()) {
    ready_values_.erase(pg_id);
    objects_->MarkLost(ready, st.code(), st.message());
  }
}

void PlacementService::HandleRemove(const std::shared_ptr<Client>& c, uint64_t req,
                                    const rpc::PlacementGroupRequest& m) {
  rpc::PlacementGroupReply reply;
  if (pgs_.Coordinates(m.pg_id())) {
    *reply.mutable_status() = ToProto(pgs_.Remove(m.pg_id()));
    return Clients::Reply(*c, rpc::PG_REMOVE, req, reply);
  }
  // Another node coordinates it: ask it to.
  std::weak_ptr<Client> weak = c;
  std::string pg = m.pg_id();
  gcs_->GetPlacementGroup(pg, [this, weak, req, m](Result<rpc::PlacementGroupInfo> r) {
    auto answer = [this, weak, req](const Status& st) {
      auto cl = weak.lock();
      if (!cl) return;
      rpc::PlacementGroupReply out;
      *out.mutable_status() = ToProto(st);
      Clients::Reply(*cl, rpc::PG_REMOVE, req, out);
    };
    if (!r.ok()) return answer(r.status());
    if (r.value().state() == rpc::PG_REMOVED) return answer(Status::OK());
    peers_->Call(r.value().coordinator_node(), rpc::PG_REMOVE, m, kRemoteTimeoutMs,
                    [answer](Result<std::string> rr) {
                      if (!rr.ok()) return answer(rr.status());
                      rpc::Status st;
                      st.ParseFromString(rr.value());
                      answer(FromProto(st));
                    });
  });
}

void PlacementService::HandleGet(const std::shared_ptr<Client>& c, uint64_t req,
                                 const rpc::PlacementGroupRequest& m) {
  const rpc::PlacementGroupInfo* info = m.all() ? nullptr : pgs_.Find(m.pg_id());
  if (info != nullptr) {
    rpc::PlacementGroupReply reply;
    *reply.mutable_info() = *info;
    return Clients::Reply(*c, rpc::PG_GET, req, reply);
  }
  std::weak_ptr<Client> weak = c;
  gcs_->GetAllPlacementGroups([this, weak, req, m](Result<std::vector<rpc::PlacementGroupInfo>> all) {
    auto cl = weak.lock();
    if (!cl) return;
    rpc::PlacementGroupReply reply;
    if (!all.ok()) {
      *reply.mutable_status() = ToProto(all.status());
      return Clients::Reply(*cl, rpc::PG_GET, req, reply);
    }
    if (m.all()) {  // placement_group_table(): the GCS's, with this node's own groups as they are now
      std::unordered_set<std::string> listed;  // (its writes to the GCS may still be on their way)
      for (const auto& g : all.value()) {
        const rpc::PlacementGroupInfo* mine = pgs_.Find(g.pg_id());
        rpc::PlacementGroupInfo* out = reply.add_groups();
        *out = mine != nullptr ? *mine : g;
        out->clear_ready_value();
        listed.insert(g.pg_id());
      }
      pgs_.ForEach([&](const rpc::PlacementGroupInfo& g) {
        if (listed.count(g.pg_id())) return;
        rpc::PlacementGroupInfo* out = reply.add_groups();
        *out = g;
        out->clear_ready_value();
      });
      return Clients::Reply(*cl, rpc::PG_GET, req, reply);
    }
    bool found = false;
    for (const auto& g : all.value()) {
      bool match = m.pg_id().empty()
                       ? (g.name() == m.name() && g.namespace_name() == m.namespace_name() && g.state() != rpc::PG_REMOVED)
                       : g.pg_id() == m.pg_id();
      if (match) {
        *reply.mutable_info() = g;
        found = true;
        break;
      }
    }
    if (!found) {
      *reply.mutable_status() = ToProto(Status::NotFound(
          m.pg_id().empty() ? "no placement group named '" + m.name() + "'" : "no placement group " + ToHex(m.pg_id())));
    }
    Clients::Reply(*cl, rpc::PG_GET, req, reply);
  });
}

void PlacementService::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  router.OnClient(rpc::PG_CREATE, "placement group", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::CreatePlacementGroup m;
    if (!ParseBody(&m, b, n)) return false;
    HandleCreate(*c, std::move(m));
    return true;
  });
  router.OnClient(rpc::PG_REMOVE, "placement group removal", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::PlacementGroupRequest m;
    if (!ParseBody(&m, b, n) || m.pg_id().size() != kTaskIdSize) return false;
    HandleRemove(c, req, m);
    return true;
  });
  router.OnClient(rpc::PG_GET, "placement group lookup", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::PlacementGroupRequest m;
    if (!ParseBody(&m, b, n) || (!m.pg_id().empty() && m.pg_id().size() != kTaskIdSize)) return false;
    HandleGet(c, req, m);
    return true;
  });
  for (rpc::MessageType type : {rpc::BUNDLE_PREPARE, rpc::BUNDLE_COMMIT, rpc::BUNDLE_RETURN, rpc::PG_REMOVE}) {
    router.OnPeer(type, "placement group message", [this, type](const char* b, size_t n, const PeerReply& reply) {
      HandlePeer(type, std::string(b, n), reply);
      return true;
    });
  }
}

}  // namespace phalanx::scheduler
