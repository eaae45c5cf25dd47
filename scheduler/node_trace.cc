// NodeManager's part of the timeline (core/trace.h, docs/observability.md):
// the trace rings of this node's processes, read from their files when
// asked, and a client's request answered with every live node's, each with
// its clock's offset measured against this raylet's.
#include <memory>

#include "core/ids.h"
#include "core/logging.h"
#include "core/status_proto.h"
#include "core/trace.h"
#include "scheduler/node_manager.h"

namespace phalanx::scheduler {

namespace {
constexpr int64_t kTraceTimeoutMs = 10000;  // a node that does not answer in time is left out, saying so
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
    r->set_records(std::move(dump.value().records));
  }
  return out;
}

void NodeManager::HandleTrace(const std::shared_ptr<Client>& c, uint64_t req, const rpc::TraceRequest& m) {
  struct Collect {
    rpc::TraceReply reply;
    int waiting = 0;
    std::weak_ptr<Client> client;
    uint64_t request_id = 0;
  };
  auto col = std::make_shared<Collect>();
  col->client = c;
  col->request_id = req;
  rpc::TraceNode* self = col->reply.add_nodes();
  *self = LocalTrace(m.since_ns());
  self->set_now_ns(trace::NowNs());
  auto finish = [this, col] {
    auto cl = col->client.lock();
    if (cl && !cl->conn->closed()) Reply(*cl, rpc::TRACE_COLLECT, col->request_id, col->reply);
  };
  if (!m.all_nodes()) return finish();
  // Every node the GCS lists alive (not only those this raylet heard from lately).
  uint64_t since_ns = m.since_ns();
  gcs_.GetAllNodes([this, col, since_ns, finish](Result<std::vector<rpc::NodeInfo>> all) {
    std::vector<std::string> others;
    if (!all.ok()) col->reply.mutable_nodes(0)->set_error("the other nodes were not asked: " + all.status().message());
    if (all.ok()) {
      for (const auto& n : all.value()) {
        if (n.alive() && n.node_id() != node_id_) others.push_back(n.node_id());
      }
    }
    if (others.empty()) return finish();
    col->waiting = static_cast<int>(others.size());
    rpc::TraceRequest ask;
    ask.set_since_ns(since_ns);
    for (const auto& node : others) {
      uint64_t sent = trace::NowNs();
      peers_.CallNode(node, rpc::TRACE_COLLECT, ask, kTraceTimeoutMs, [col, node, sent, finish](Result<std::string> r) {
        uint64_t got = trace::NowNs();
        rpc::TraceNode n;
        if (!r.ok()) {
          n.set_node_id(node);
          n.set_error(r.status().message());
        } else if (!n.ParseFromString(r.value()) || n.node_id() != node) {
          n = rpc::TraceNode();
          n.set_node_id(node);
          n.set_error("a malformed answer");
        } else {
          // Its clock read `now_ns` about halfway through the round trip.
          n.set_rtt_ns(got - sent);
          n.set_offset_ns(static_cast<int64_t>(sent + (got - sent) / 2) - static_cast<int64_t>(n.now_ns()));
        }
        *col->reply.add_nodes() = std::move(n);
        if (--col->waiting == 0) finish();
      });
    }
  });
}

}  // namespace phalanx::scheduler
