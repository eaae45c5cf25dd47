#include <unistd.h>

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "core/ids.h"
#include "core/logging.h"
#include "core/status_proto.h"
#include "core/trace.h"
#include "scheduler/inspection.h"

namespace phalanx::scheduler {

namespace {
constexpr int64_t kAskTimeoutMs = 10000;  // a node that does not answer in time is left out, saying so
constexpr uint32_t kDefaultMaxObjects = 1000;
constexpr size_t kMaxInFlight = 4096;  // records of each kind of work still running, per node
}  // namespace

Inspection::Inspection(std::string node_id, std::string node_ip, std::string session_dir, InspectedParts parts,
                       GcsClient* gcs, PeerChannel* peers)
    : node_id_(std::move(node_id)),
      node_ip_(std::move(node_ip)),
      session_dir_(std::move(session_dir)),
      parts_(parts),
      gcs_(gcs),
      peers_(peers) {}

rpc::StatsReply Inspection::Counters() const {
  rpc::StatsReply r;
  auto s = parts_.objects->store().Stats();
  auto t = parts_.tasks->Stats();
  r.set_store_capacity(s.capacity);
  r.set_store_used(s.used);
  r.set_store_objects(s.objects);
  r.set_inline_objects(parts_.objects->table().num_inline());
  r.set_inline_bytes(parts_.objects->table().inline_bytes());
  r.set_tasks_queued(t.queued);
  r.set_tasks_running(t.running);
  r.set_tasks_finished(t.finished);
  r.set_workers(parts_.pool->size());
  r.set_ref_entries(parts_.objects->table().num_entries());
  r.set_reduce_chains(parts_.reduces->num_chains());
  r.set_reduce_fallbacks(parts_.reduces->num_fallbacks());
  r.set_reduce_rewinds(parts_.reduces->num_rewinds());
  r.set_reduce_steps(parts_.steps->num_steps());
  r.set_allreduce_sliced(parts_.allreduces->num_sliced());
  r.set_streams(parts_.streams->size());
  r.set_stream_items_held(parts_.streams->held());
  auto sp = parts_.objects->spill_stats();
  r.set_spilled_objects(sp.objects);
  r.set_spilled_bytes(sp.bytes);
  r.set_spilled_total_objects(sp.spilled_objects);
  r.set_spilled_total_bytes(sp.spilled_bytes);
  r.set_restored_total_objects(sp.restored_objects);
  r.set_restored_total_bytes(sp.restored_bytes);
  r.set_spill_seconds(sp.spill_seconds);
  r.set_restore_seconds(sp.restore_seconds);
  r.set_tasks_failed(t.failed);
  r.set_tasks_retried(t.retried);
  r.set_tasks_spilled(t.spilled);
  r.set_tasks_reconstructed(t.reconstructed);
  r.set_lineage_specs(parts_.tasks->lineage().size());
  r.set_lineage_bytes(parts_.tasks->lineage().bytes());
  r.set_lineage_dropped(parts_.tasks->lineage().dropped());
  return r;
}

void Inspection::AskEveryNode(rpc::MessageType type, const google::protobuf::Message& ask, AskEach each,
                               std::function<void(const Status&)> done) {
  std::shared_ptr<google::protobuf::Message> copy(ask.New());
  copy->CopyFrom(ask);
  // Every node the GCS lists alive (not only those this raylet heard from lately).
  gcs_->GetAllNodes([this, type, copy, each, done](Result<std::vector<rpc::NodeInfo>> all) {
    if (!all.ok()) return done(Status::Unavailable("the other nodes were not asked: " + all.status().message()));
    std::vector<std::string> others;
    for (const auto& n : all.value()) {
      if (n.alive() && n.node_id() != node_id_) others.push_back(n.node_id());
    }
    if (others.empty()) return done(Status::OK());
    auto waiting = std::make_shared<size_t>(others.size());
    for (const auto& node : others) {
      uint64_t sent = trace::NowNs();
      peers_->Call(node, type, *copy, kAskTimeoutMs, [node, sent, each, done, waiting](Result<std::string> r) {
        each(node, r, sent, trace::NowNs());
        if (--*waiting == 0) done(Status::OK());
      });
    }
  });
}

rpc::TraceNode Inspection::LocalTrace(uint64_t since_ns) const {
  rpc::TraceNode out;
  out.set_node_id(node_id_);
  out.set_address(node_ip_);
  for (const auto& path : trace::RingFiles(session_dir_, node_id_)) {
    auto dump = trace::ReadRing(path, since_ns);
    if (!dump.ok()) continue;  // (a ring being made, or a stray file)
    if (dump.value().node != node_id_) continue;
    rpc::TraceRing* r = out.add_rings();
    r->set_pid(dump.value().pid);
    r->set_label(dump.value().label);
    r->set_start_ns(dump.value().start_ns);
    r->set_written(dump.value().written);
    r->set_capacity(dump.value().capacity);
    r->set_records(std::move(dump.value().records));
  }
  // What is still running here has no record yet (one is written as each
  // ends): the raylet makes them now, flagged kInFlight, up to now.
  std::string live;
  parts_.tasks->TraceInFlight(&live, kMaxInFlight);
  parts_.objects->transfer().TraceInFlight(&live, kMaxInFlight);
  parts_.steps->TraceInFlight(&live, kMaxInFlight);
  if (!live.empty()) {
    rpc::TraceRing* r = out.add_rings();
    r->set_pid(static_cast<int32_t>(::getpid()));
    r->set_label("in flight");
    r->set_start_ns(trace::NowNs());
    r->set_written(live.size() / sizeof(trace::Record));
    r->set_capacity(live.size() / sizeof(trace::Record));
    r->set_records(std::move(live));
  }
  *out.mutable_counters() = Counters();
  out.set_now_ns(trace::NowNs());
  return out;
}

template <typename ReplyMsg, typename NodePart>
void Inspection::AnswerFromEveryNode(const std::shared_ptr<Client>& c, uint64_t req, rpc::MessageType type,
                                      bool all_nodes, NodePart local, const google::protobuf::Message& ask,
                                      std::function<void(NodePart*, uint64_t, uint64_t)> fix) {
  auto reply = std::make_shared<ReplyMsg>();
  *reply->add_nodes() = std::move(local);
  std::weak_ptr<Client> weak = c;
  auto finish = [this, reply, weak, req, type](const Status& st) {
    if (!st.ok()) reply->mutable_nodes(0)->set_error(st.message());
    auto cl = weak.lock();
    if (cl && !cl->conn->closed()) Clients::Reply(*cl, type, req, *reply);
  };
  if (!all_nodes) return finish(Status::OK());
  AskEveryNode(
      type, ask,
      [reply, fix](const std::string& node, const Result<std::string>& r, uint64_t sent, uint64_t got) {
        NodePart n;
        if (!r.ok()) {
          n.set_error(r.status().message());
        } else if (!n.ParseFromString(r.value()) || n.node_id() != node) {
          n = NodePart();
          n.set_error("a malformed answer");
        } else if (fix) {
          fix(&n, sent, got);
        }
        n.set_node_id(node);
        *reply->add_nodes() = std::move(n);
      },
      finish);
}

void Inspection::HandleTrace(const std::shared_ptr<Client>& c, uint64_t req, const rpc::TraceRequest& m) {
  rpc::TraceRequest ask;
  ask.set_since_ns(m.since_ns());
  AnswerFromEveryNode<rpc::TraceReply, rpc::TraceNode>(
      c, req, rpc::TRACE_COLLECT, m.all_nodes(), LocalTrace(m.since_ns()), ask,
      [](rpc::TraceNode* n, uint64_t sent, uint64_t got) {
        // Its clock read `now_ns` about halfway through the round trip.
        n->set_rtt_ns(got - sent);
        n->set_offset_ns(static_cast<int64_t>(sent + (got - sent) / 2) - static_cast<int64_t>(n->now_ns()));
      });
}

rpc::NodeMemory Inspection::LocalMemory(uint32_t max_objects) const {
  rpc::NodeMemory out;
  out.set_node_id(node_id_);
  out.set_address(node_ip_);
  auto s = parts_.objects->store().Stats();
  out.set_store_capacity(s.capacity);
  out.set_store_used(s.used);
  out.set_spilled_bytes(parts_.objects->spill_stats().bytes);
  out.set_objects(parts_.objects->table().num_entries());
  // What keeps each object: the processes here (their references and
  // mappings), tasks here (arguments, and the lineage's kept specs), other
  // nodes (holds), and other objects (refs nested in their values).
  std::unordered_map<std::string, std::vector<rpc::ObjectHolder>> why;
  auto add = [&why](const std::string& id, const std::string& kind, const std::string& who, int64_t n) {
    rpc::ObjectHolder h;
    h.set_kind(kind);
    h.set_who(who);
    h.set_count(n);
    why[id].push_back(std::move(h));
  };
  parts_.clients->ForEach([&add](Client& c) {
    std::string who = "PID " + std::to_string(c.pid);
    for (const auto& id : c.holds) add(id, c.is_worker ? "worker" : "driver", who, 1);
    for (const auto& [id, n] : c.pins) {
      if (n > 0) add(id, "mapped", who, n);
    }
  });
  parts_.tasks->ForEachArgument([&add](const std::string& id, const std::string& task, bool running, bool lineage) {
    if (lineage) return add(id, "lineage", task, 1);
    add(id, "task argument", task + (running ? " (running)" : " (queued)"), 1);
  });
  parts_.objects->ForEachHeldFor([&add](const std::string& node, const std::string& id, uint32_t n) {
    add(id, "held for node", ToHex(node).substr(0, 12), n);
  });
  struct Row {
    std::string id;
    objectstore::ObjectTable::EntryView v;
  };
  std::vector<Row> rows;
  rows.reserve(parts_.objects->table().num_entries());
  parts_.objects->table().ForEachEntry([&](const std::string& id, const objectstore::ObjectTable::EntryView& v) {
    rows.push_back({id, v});
    for (const auto& c : *v.contained) add(c, "inside object", ToHex(id).substr(0, 12), 1);
  });
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.v.size != b.v.size ? a.v.size > b.v.size : a.id < b.id;
  });
  if (max_objects == 0) max_objects = kDefaultMaxObjects;
  for (size_t i = 0; i < rows.size() && i < max_objects; ++i) {
    const Row& r = rows[i];
    rpc::ObjectMemory* o = out.add_list();
    o->set_object_id(r.id);
    o->set_size(r.v.size);
    o->set_where(r.v.where);
    o->set_refs(r.v.refs);
    if (!r.v.remote_node->empty()) o->set_remote_node(*r.v.remote_node);
    int64_t named = 0;
    auto w = why.find(r.id);
    if (w != why.end()) {
      for (auto& h : w->second) {
        named += h.count();
        *o->add_holders() = std::move(h);
      }
    }
    if (r.v.refs > named) {  // (a copy in flight, a get waiting, a reduce's input ...)
      rpc::ObjectHolder* h = o->add_holders();
      h->set_kind("other");
      h->set_who("this node's own use (a copy, a get or a collective in progress)");
      h->set_count(r.v.refs - named);
    }
  }
  return out;
}

void Inspection::HandleMemory(const std::shared_ptr<Client>& c, uint64_t req, const rpc::MemoryRequest& m) {
  rpc::MemoryRequest ask;
  ask.set_max_objects(m.max_objects());
  AnswerFromEveryNode<rpc::MemoryReply, rpc::NodeMemory>(c, req, rpc::MEMORY_SUMMARY, m.all_nodes(),
                                                         LocalMemory(m.max_objects()), ask, nullptr);
}

void Inspection::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  router.OnClient(rpc::GET_STATS, "stats request", [this](C c, uint64_t req, const char*, size_t) {
    HandleStats(*c, req);
    return true;
  });
  router.OnClient(rpc::TRACE_COLLECT, "timeline request", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::TraceRequest m;
    if (!ParseBody(&m, b, n)) return false;
    HandleTrace(c, req, m);
    return true;
  });
  router.OnClient(rpc::MEMORY_SUMMARY, "memory summary", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::MemoryRequest m;
    if (!ParseBody(&m, b, n)) return false;
    HandleMemory(c, req, m);
    return true;
  });
  router.OnPeer(rpc::TRACE_COLLECT, "timeline request", [this](const char* b, size_t n, const PeerReply& reply) {
    rpc::TraceRequest m;
    if (!ParseBody(&m, b, n)) {
      reply(rpc::TraceNode());
    } else {
      reply(LocalTrace(m.since_ns()));
    }
    return true;
  });
  router.OnPeer(rpc::MEMORY_SUMMARY, "memory summary", [this](const char* b, size_t n, const PeerReply& reply) {
    rpc::MemoryRequest m;
    if (!ParseBody(&m, b, n)) {
      reply(rpc::NodeMemory());
    } else {
      reply(LocalMemory(m.max_objects()));
    }
    return true;
  });
}

}  // namespace phalanx::scheduler
