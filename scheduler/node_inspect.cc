// NodeManager's answers to the questions a person asks of the cluster
// (docs/observability.md): the timeline (the trace rings of this node's
// processes, core/trace.h) and `phalanx memory` (this node's objects, and
// what keeps each one). A client's question is answered for every live node:
// this raylet asks the others and puts their answers together.
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "core/ids.h"
#include "core/logging.h"
#include "core/status_proto.h"
#include "core/trace.h"
#include "scheduler/node_manager.h"

namespace phalanx::scheduler {

namespace {
constexpr int64_t kAskTimeoutMs = 10000;  // a node that does not answer in time is left out, saying so
constexpr uint32_t kDefaultMaxObjects = 1000;
constexpr size_t kMaxInFlight = 4096;  // records of each kind of work still running, per node
}  // namespace

void NodeManager::AskEveryNode(rpc::MessageType type, const google::protobuf::Message& ask, AskEach each,
                               std::function<void(const Status&)> done) {
  std::shared_ptr<google::protobuf::Message> copy(ask.New());
  copy->CopyFrom(ask);
  // Every node the GCS lists alive (not only those this raylet heard from lately).
  gcs_.GetAllNodes([this, type, copy, each, done](Result<std::vector<rpc::NodeInfo>> all) {
    if (!all.ok()) return done(Status::Unavailable("the other nodes were not asked: " + all.status().message()));
    std::vector<std::string> others;
    for (const auto& n : all.value()) {
      if (n.alive() && n.node_id() != node_id_) others.push_back(n.node_id());
    }
    if (others.empty()) return done(Status::OK());
    auto waiting = std::make_shared<size_t>(others.size());
    for (const auto& node : others) {
      uint64_t sent = trace::NowNs();
      peers_.CallNode(node, type, *copy, kAskTimeoutMs, [node, sent, each, done, waiting](Result<std::string> r) {
        each(node, r, sent, trace::NowNs());
        if (--*waiting == 0) done(Status::OK());
      });
    }
  });
}

rpc::TraceNode NodeManager::LocalTrace(uint64_t since_ns) {
  rpc::TraceNode out;
  out.set_node_id(node_id_);
  out.set_address(options_.node_ip);
  for (const auto& path : trace::RingFiles(options_.session_dir, node_id_)) {
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
  tasks_.TraceInFlight(&live, kMaxInFlight);
  om_.transfer().TraceInFlight(&live, kMaxInFlight);
  steps_.TraceInFlight(&live, kMaxInFlight);
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
void NodeManager::AnswerFromEveryNode(const std::shared_ptr<Client>& c, uint64_t req, rpc::MessageType type,
                                      bool all_nodes, NodePart local, const google::protobuf::Message& ask,
                                      std::function<void(NodePart*, uint64_t, uint64_t)> fix) {
  auto reply = std::make_shared<ReplyMsg>();
  *reply->add_nodes() = std::move(local);
  std::weak_ptr<Client> weak = c;
  auto finish = [this, reply, weak, req, type](const Status& st) {
    if (!st.ok()) reply->mutable_nodes(0)->set_error(st.message());
    auto cl = weak.lock();
    if (cl && !cl->conn->closed()) Reply(*cl, type, req, *reply);
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

void NodeManager::HandleTrace(const std::shared_ptr<Client>& c, uint64_t req, const rpc::TraceRequest& m) {
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

rpc::NodeMemory NodeManager::LocalMemory(uint32_t max_objects) {
  rpc::NodeMemory out;
  out.set_node_id(node_id_);
  out.set_address(options_.node_ip);
  auto s = store_->Stats();
  out.set_store_capacity(s.capacity);
  out.set_store_used(s.used);
  out.set_spilled_bytes(om_.spill_stats().bytes);
  out.set_objects(objects_.num_entries());
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
  for (const auto& [p, c] : clients_) {
    std::string who = "PID " + std::to_string(c->pid);
    for (const auto& id : c->holds) add(id, c->is_worker ? "worker" : "driver", who, 1);
    for (const auto& [id, n] : c->pins) {
      if (n > 0) add(id, "mapped", who, n);
    }
  }
  tasks_.ForEachArgument([&add](const std::string& id, const std::string& task, bool running, bool lineage) {
    if (lineage) return add(id, "lineage", task, 1);
    add(id, "task argument", task + (running ? " (running)" : " (queued)"), 1);
  });
  om_.ForEachHeldFor([&add](const std::string& node, const std::string& id, uint32_t n) {
    add(id, "held for node", ToHex(node).substr(0, 12), n);
  });
  struct Row {
    std::string id;
    objectstore::ObjectTable::EntryView v;
  };
  std::vector<Row> rows;
  rows.reserve(objects_.num_entries());
  objects_.ForEachEntry([&](const std::string& id, const objectstore::ObjectTable::EntryView& v) {
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

void NodeManager::HandleMemory(const std::shared_ptr<Client>& c, uint64_t req, const rpc::MemoryRequest& m) {
  rpc::MemoryRequest ask;
  ask.set_max_objects(m.max_objects());
  AnswerFromEveryNode<rpc::MemoryReply, rpc::NodeMemory>(c, req, rpc::MEMORY_SUMMARY, m.all_nodes(),
                                                         LocalMemory(m.max_objects()), ask, nullptr);
}

}  // namespace phalanx::scheduler
