// StreamService (scheduler/stream_service.h): the raylet's side of generators. Items arrive
// from this node's workers (TASK_DONE with `item`), from callers of actors
// (DIRECT_RESULTS) and from the node a task was spilled to (STREAM_ITEMS);
// an item of a task whose caller is on another node is passed on there,
// its store copy staying here, held for that node, until read. Producers ask
// their own raylet for credit, which asks the caller's node.
#include <algorithm>

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/status_proto.h"
#include "scheduler/stream_service.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

namespace {
// How long a relayed item may take to be taken by the caller's node.
constexpr int64_t kRelayTimeoutMs = 30000;
// The longest a credit request waits before it is answered as it stands.
constexpr int64_t kMaxCreditWaitMs = 60000;

// Only items of `m`'s own task: ids under its task id, past its return.
// The store ones dropped go to `others` (when given).
void KeepOwnItems(rpc::TaskDone* m, std::vector<std::string>* others) {
  auto* rs = m->mutable_returns();
  for (int i = rs->size() - 1; i >= 0; --i) {
    const std::string& id = rs->Get(i).object_id();
    if (TaskIdOf(id) == m->task_id() && IndexOf(id) >= 2) continue;
    if (others != nullptr && rs->Get(i).in_store()) others->push_back(id);
    rs->DeleteSubrange(i, 1);
  }
}
}  // namespace

StreamService::StreamService(boost::asio::io_context& io, std::string node_id, objectstore::ObjectTable* objects,
                             TaskTable* tasks, ObjectTasks* lender, PeerChannel* peers, Clients* clients,
                             HandedResults* results)
    : node_id_(std::move(node_id)),
      objects_(objects),
      tasks_(tasks),
      lender_(lender),
      peers_(peers),
      clients_(clients),
      results_(results),
      table_(io, objects) {}

void StreamService::HandlePeer(rpc::MessageType type, const std::string& body, const PeerReply& reply) {
  if (type == rpc::STREAM_ITEMS) {
    rpc::TaskDone m;
    if (!m.ParseFromString(body) || m.task_id().size() != kTaskIdSize || !ResultIdsOk(m) || !m.item()) {
      return reply(ToProto(Status::InvalidArgument("malformed stream items")));
    }
    StoreItems(std::move(m));
    return reply(rpc::Status());
  }
  rpc::StreamCredit m;
  if (!m.ParseFromString(body) || m.task_id().size() != kTaskIdSize) {
    rpc::StreamCreditReply r;
    *r.mutable_status() = ToProto(Status::InvalidArgument("malformed stream credit request"));
    return reply(r);
  }
  table_.Credit(m.task_id(), m.need(), std::clamp<int64_t>(m.timeout_ms(), 0, kMaxCreditWaitMs),
                  [reply](const rpc::StreamCreditReply& r) { reply(r); });
}

void StreamService::HandleWorkerItems(Client& c, rpc::TaskDone m) {
  std::vector<std::string> unwanted;
  KeepOwnItems(&m, &unwanted);
  const rpc::TaskSpec* spec = tasks_->MutableSpec(m.task_id());
  if (spec == nullptr || spec->generator() == rpc::GENERATOR_NONE) {
    for (const auto& r : m.returns()) {
      if (r.in_store()) unwanted.push_back(r.object_id());
    }
    m.clear_returns();
  }
  for (const auto& id : unwanted) {  // made and held by the worker: nobody else will want them
    if (c.holds.erase(id)) objects_->RemoveRef(id);
  }
  if (m.returns_size() == 0 && !m.stream_end()) return;
  m.set_release_holder(c.client_id);
  m.set_holder_node(node_id_);
  if (spec != nullptr && !spec->origin_node().empty() && spec->origin_node() != node_id_) {
    // The caller is on the node the task came from: the items go there. Store
    // items stay here, held by the worker until that node adopts them.
    std::vector<std::string> held;
    for (const auto& r : m.returns()) {
      if (r.in_store()) held.push_back(r.object_id());
    }
    std::string holder = c.client_id;
    peers_->Call(spec->origin_node(), rpc::STREAM_ITEMS, m, kRelayTimeoutMs,
                    [this, holder, held](Result<std::string> r) {
                      if (r.ok()) return;
                      PHALANX_LOG(Warning) << "items of a generator could not reach its caller's node: "
                                           << r.status().ToString();
                      Client* h = clients_->Find(holder);
                      if (h == nullptr) return;
                      for (const auto& id : held) {
                        if (h->holds.erase(id)) objects_->RemoveRef(id);
                      }
                    });
    return;
  }
  StoreOwnItems(std::move(m));
}

void StreamService::StoreItems(rpc::TaskDone m) {
  KeepOwnItems(&m, nullptr);  // (from a caller or a node: their store copies are not ours to free)
  StoreOwnItems(std::move(m));
}

void StreamService::StoreOwnItems(rpc::TaskDone m) {
  for (const auto& r : m.returns()) table_.OnItem(m.task_id(), IndexOf(r.object_id()) - 2);
  results_->StoreHandedResults(m);
  if (m.stream_end()) table_.OnEnd(m.task_id(), m.stream_items());
}

void StreamService::HandleStreamNext(const std::shared_ptr<Client>& c, uint64_t req, const rpc::StreamNext& m) {
  std::weak_ptr<Client> weak = c;
  struct Wait {
    bool answered = false;
    bool lent = false;
    uint64_t lease_seq = 0;  // the worker's lease it blocked in (a later lease is not unblocked)
  };
  auto wait = std::make_shared<Wait>();
  table_.Next(m.task_id(), c->client_id, m.consumed(), m.timeout_ms(),
              [this, weak, req, wait](const rpc::StreamNextReply& r) {
                wait->answered = true;
                auto cl = weak.lock();
                if (!cl) return;
                if (wait->lent && cl->worker != nullptr && cl->worker->lease_seq == wait->lease_seq) {
                  lender_->OnWorkerUnblocked(cl->worker);
                }
                Clients::Reply(*cl, rpc::STREAM_NEXT, req, r);
              });
  if (!wait->answered && c->worker != nullptr) {  // the reader waits for an item: its CPUs are lent
    wait->lent = true;
    wait->lease_seq = c->worker->lease_seq;
    lender_->OnWorkerBlocked(c->worker);
  }
}

void StreamService::HandleStreamCredit(const std::shared_ptr<Client>& c, uint64_t req, const rpc::StreamCredit& m) {
  std::weak_ptr<Client> weak = c;
  auto reply = [this, weak, req](const rpc::StreamCreditReply& r) {
    if (auto cl = weak.lock()) Clients::Reply(*cl, rpc::STREAM_CREDIT, req, r);
  };
  int64_t timeout = std::clamp<int64_t>(m.timeout_ms(), 0, kMaxCreditWaitMs);
  if (m.owner_node().empty() || m.owner_node() == node_id_) {
    return table_.Credit(m.task_id(), m.need(), timeout, reply);
  }
  rpc::StreamCredit ask = m;
  ask.clear_owner_node();
  ask.set_timeout_ms(timeout);
  peers_->Call(m.owner_node(), rpc::STREAM_CREDIT, ask, timeout + 5000, [reply](Result<std::string> r) {
    rpc::StreamCreditReply out;
    if (!r.ok() || !out.ParseFromString(r.value())) {
      // The caller's node is gone (or garbled its answer): so is the reader.
      out.set_dropped(true);
      *out.mutable_status() = ToProto(r.ok() ? Status::Internal("malformed stream credit reply") : r.status());
    }
    reply(out);
  });
}

void StreamService::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  router.OnClient(rpc::STREAM_NEXT, "stream read", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::StreamNext m;
    if (!ParseBody(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
    HandleStreamNext(c, req, m);
    return true;
  });
  router.OnClient(rpc::STREAM_DROP, "stream drop", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::TaskIds m;
    if (!ParseBody(&m, b, n)) return false;
    for (const auto& tid : m.task_ids()) table_.Drop(tid, c->client_id);
    return true;
  });
  router.OnClient(rpc::STREAM_CREDIT, "stream credit", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::StreamCredit m;
    if (!ParseBody(&m, b, n) || c->worker == nullptr || m.task_id().size() != kTaskIdSize) return false;
    HandleStreamCredit(c, req, m);
    return true;
  });
  for (rpc::MessageType type : {rpc::STREAM_ITEMS, rpc::STREAM_CREDIT}) {
    router.OnPeer(type, "stream message", [this, type](const char* b, size_t n, const PeerReply& reply) {
      HandlePeer(type, std::string(b, n), reply);
      return true;
    });
  }
}

}  // namespace phalanx::scheduler
