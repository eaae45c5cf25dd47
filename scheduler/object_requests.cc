#include "scheduler/object_requests.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unordered_set>
#include <cstring>

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/status_proto.h"
#include "scheduler/worker_pool.h"

namespace phalanx::scheduler {

namespace asio = boost::asio;

struct ObjectRequests::PendingGet {
  std::weak_ptr<Client> client;
  uint64_t request_id = 0;
  std::vector<std::string> ids;
  int waiting = 0;
  bool done = false;
  bool blocked_worker = false;
  uint64_t lease_seq = 0;  // the worker's lease it blocked in (Worker::lease_seq)
  bool has_deadline = false;
  GetDeadlines::iterator deadline;  // its entry in get_deadlines_, when has_deadline
};

struct ObjectRequests::PendingWait {
  std::weak_ptr<Client> client;
  uint64_t request_id = 0;
  std::vector<std::string> ids;
  int ready = 0;
  int needed = 0;
  bool fetch = true;  // an object counts once here (else: once ready anywhere)
  bool done = false;
  std::unique_ptr<asio::steady_timer> timer;
};

namespace {
// Whether a get or wait may answer for `id`: once it is ready here, or, when
// not fetching, once it is known to be ready on another node too. A get
// that reads the value (`resident`) waits for a spilled one to be read back.
bool Counts(const objectstore::ObjectTable& objects, bool fetch, const std::string& id, bool resident = false) {
  if (resident) return objects.IsResident(id);
  return objects.IsReady(id) || (!fetch && !objects.RemoteNode(id).empty());
}

// Runs `cb` once `id` Counts. (OnReady of an object on another node copies it here; OnLocated does not.)
void WhenCounts(objectstore::ObjectTable& objects, bool fetch, const std::string& id,
                objectstore::ObjectTable::ReadyCallback cb, bool resident = false) {
  if (resident) return objects.OnResident(id, std::move(cb));
  fetch ? objects.OnReady(id, std::move(cb)) : objects.OnLocated(id, std::move(cb));
}
}  // namespace

ObjectRequests::ObjectRequests(boost::asio::io_context& io, std::string node_id, objectstore::ObjectManager* objects,
                               ObjectTasks* tasks, NodeLiveness* peers, GcsClient* gcs, Clients* clients,
                               int64_t copy_progress_ms)
    : io_(io),
      node_id_(std::move(node_id)),
      om_(objects),
      objects_(objects->table()),
      tasks_(tasks),
      peers_(peers),
      gcs_(gcs),
      clients_(clients),
      copy_progress_ms_(copy_progress_ms),
      deadline_timer_(io) {}

void ObjectRequests::Hold(Client& c, const std::string& id) {
  if (c.holds.insert(id).second) objects_.AddRef(id);
}

void ObjectRequests::ClientRegistered(const std::string& client_id) {
  own_creators_.insert(CreatorKey(client_id));
  if (creators_.insert(CreatorKey(client_id)).second) gcs_->RegisterClient(client_id, node_id_);
}

void ObjectRequests::OnClientGone(Client& c, const std::string&) {
  for (const auto& [id, n] : c.pins) {
    for (int64_t i = 0; i < n; ++i) objects_.ReleasePin(id);
  }
  c.pins.clear();
  for (const auto& id : c.creating) objects_.AbortCreate(id);
  c.creating.clear();
  for (const auto& id : c.expected) {
    if (!objects_.IsReady(id)) {
      objects_.MarkLost(id, StatusCode::kObjectLost,
                        "the process that called the actor exited before the call's result came back to it");
    }
  }
  c.expected.clear();
  auto holds = std::move(c.holds);
  c.holds.clear();
  for (const auto& id : holds) objects_.RemoveRef(id);
}

void ObjectRequests::HandleGet(const std::shared_ptr<Client>& c, uint64_t req, const rpc::GetObjects& m) {
  auto g = std::make_shared<PendingGet>();
  g->client = c;
  g->request_id = req;
  g->ids.assign(m.object_ids().begin(), m.object_ids().end());
  const bool fetch = !m.locate_only();
  // A get of several values ends at the first that failed (as Ray's): the
  // rest may wait on the program that waits on this get.
  const bool many = fetch && g->ids.size() > 1;
  bool failed = false;
  for (const auto& id : g->ids) {
    if (!Counts(objects_, fetch, id, fetch)) {
      ++g->waiting;
    } else if (many && objects_.IsFailed(id)) {
      failed = true;
    }
  }
  if (g->waiting == 0 || failed) return CompleteGet(g);
  CheckCreators(g->ids);
  for (const auto& id : g->ids) {
    if (Counts(objects_, fetch, id, fetch)) continue;
    if (!many) {
      WhenCounts(
          objects_, fetch, id,
          [this, g] {
            if (--g->waiting == 0) CompleteGet(g);
          },
          fetch);
      continue;
    }
    WhenCounts(
        objects_, fetch, id,
        [this, g, id] {
          if (--g->waiting == 0 || objects_.IsFailed(id)) CompleteGet(g);
        },
        fetch);
  }
  if (g->done) return;
  if (c->worker != nullptr) {
    g->blocked_worker = true;
    g->lease_seq = c->worker->lease_seq;
    tasks_->OnWorkerBlocked(c->worker);
  }
  if (m.timeout_ms() >= 0) {
    // One timer for every get's deadline, armed for the earliest: a get
    // that ends before its deadline costs a map entry, not a timer.
    auto at = GetClock::now() + std::chrono::milliseconds(std::min<int64_t>(m.timeout_ms(), int64_t{1} << 40));
    g->deadline = get_deadlines_.emplace(at, g);
    g->has_deadline = true;
    if (at < get_timer_at_) ArmGetDeadlines(at);
  }
}

void ObjectRequests::ArmGetDeadlines(GetClock::time_point at) {
  get_timer_at_ = at;
  deadline_timer_.expires_at(at);
  deadline_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // (armed again for an earlier one, or stopped)
    get_timer_at_ = GetClock::time_point::max();
    auto now = GetClock::now();
    while (!get_deadlines_.empty() && get_deadlines_.begin()->first <= now) {
      auto g = get_deadlines_.begin()->second.lock();
      get_deadlines_.erase(get_deadlines_.begin());
      if (g) {
        g->has_deadline = false;
        CompleteGet(g);
      }
    }
    if (!get_deadlines_.empty()) ArmGetDeadlines(get_deadlines_.begin()->first);
  });
}

void ObjectRequests::CheckCreators(const std::vector<std::string>& ids) {
  for (const auto& id : ids) {
    if (id.size() != kObjectIdSize) continue;
    if (creators_.count(CreatorKey(id)) || objects_.IsReady(id) || !objects_.RemoteNode(id).empty()) continue;
    std::string creator = id.substr(0, kClientIdSize);
    auto [it, first] = unknown_creators_.try_emplace(creator);
    it->second.push_back(id);
    if (!first) continue;  // asked already
    gcs_->ClientExists(creator, [this, creator](Result<bool> known) {
      auto waiting = unknown_creators_.find(creator);
      if (waiting == unknown_creators_.end()) return;
      std::vector<std::string> ids = std::move(waiting->second);
      unknown_creators_.erase(waiting);
      if (!known.ok()) return;  // the GCS did not answer: the get waits as it would have
      if (known.value()) {
        creators_.insert(CreatorKey(creator));
        return;
      }
      // No process of this cluster ever had that client id: nothing will make these.
      for (const auto& id : ids) {
        if (objects_.IsReady(id)) continue;
        objects_.MarkLost(id, StatusCode::kNotFound,
                          "no such object: ObjectRef(" + ToHex(id) +
                              ") was not made in this cluster (no process of it has its creator's id)");
      }
    });
  }
}

namespace {
std::string Bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(n) / (1ull << 30));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(n) / (1ull << 20));
  }
  return buf;
}
}  // namespace

void ObjectRequests::ReportSlowCopies() {
  // A copy a get waits on that takes more than a few seconds: the waiting
  // processes are told how far it is, every few seconds (and the log says it).
  std::chrono::milliseconds every(copy_progress_ms_);
  om_->transfer().ForEachSlowCopy(
      std::chrono::steady_clock::now(), every, every,
      [this](const std::string& id, uint64_t have, uint64_t size, double seconds, const std::string& source) {
        double rate = static_cast<double>(have) / std::max(seconds, 1e-3);
        char tail[96];
        std::snprintf(tail, sizeof(tail), ", %.1f MB/s, about %.0f s left", rate / 1e6,
                      rate > 0 ? static_cast<double>(size - have) / rate : 0.0);
        std::string msg = "copying object " + ToHex(id) + " (" + Bytes(size) + ") from node " +
                          ToHex(source).substr(0, 12) + ": " + Bytes(have) + " here after " +
                          std::to_string(static_cast<int>(seconds)) + " s" + tail;
        PHALANX_LOG(Info) << msg;
        rpc::Status note;  // (code 0: a note, not a warning)
        note.set_message(msg);
        std::unordered_set<Client*> told;
        for (const auto& [at, weak] : get_deadlines_) {
          auto g = weak.lock();
          if (!g || g->done || std::find(g->ids.begin(), g->ids.end(), id) == g->ids.end()) continue;
          auto c = g->client.lock();
          if (c && !c->conn->closed() && told.insert(c.get()).second) c->conn->Send(rpc::CLIENT_WARNING, 0, 0, note);
        }
      });
}

bool ObjectRequests::OnCopiesLost(const std::string& id, std::string* reason) {
  if (tasks_->Rebuild(id, reason)) return true;
  // Not this node's to make again: a put, or made through this node (its
  // lineage said why not), or the node that submitted its task was asked
  // already and could not.
  if (id.size() != kObjectIdSize || IndexOf(id) == 0 || own_creators_.count(CreatorKey(id))) return false;
  auto asked = asked_owner_.find(id);
  if (asked != asked_owner_.end()) {
    *reason = "the node that submitted its task (" + ToHex(asked->second.owner).substr(0, 12) +
              ") could not make it again either";
    AnsweredByOwner(id);
    return false;
  }
  // Its task was submitted through another node, which keeps its lineage:
  // find that node, and copy the object from it. It serves the copy once it
  // has the object again (from a copy left, or run again), or says why not.
  PHALANX_LOG(Info) << "every copy of object " << ToHex(id)
                    << " is gone and this node keeps no lineage of it: looking up the node that submitted its task";
  auto [lender, holds] = objects_.TakeRemoteHolds(id);
  asked_owner_.emplace(id, AskedOwner{std::string(), std::move(lender), holds});
  gcs_->ClientNode(id.substr(0, kClientIdSize), [this, id](Result<std::string> owner) { AskOwner(id, owner); });
  return true;
}

void ObjectRequests::AskOwner(const std::string& id, const Result<std::string>& owner) {
  auto asked = asked_owner_.find(id);
  if (asked == asked_owner_.end()) return;
  if (!objects_.Contains(id) || objects_.IsReady(id)) {
    PHALANX_LOG(Info) << "object " << ToHex(id) << (objects_.Contains(id) ? " arrived" : " was freed")
                      << " while the node that submitted its task was looked up";
    return AnsweredByOwner(id);
  }
  std::string cant;
  if (!owner.ok()) {
    cant = "the GCS could not say which node submitted its task: " + owner.status().message();
  } else if (owner.value() == node_id_) {
    cant = "no spec of the task that made it is kept here";
  } else if (!peers_->IsAlive(owner.value())) {
    cant = "the node that submitted its task (" + ToHex(owner.value()).substr(0, 12) +
           ") is gone too, and its lineage with it";
  }
  if (!cant.empty()) {
    AnsweredByOwner(id);
    objects_.MarkLost(id, StatusCode::kObjectLost,
                      "object " + ToHex(id) + ": no node has a copy left; it cannot be made again: " + cant);
    return;
  }
  asked->second.owner = owner.value();
  PHALANX_LOG(Info) << "every copy of object " << ToHex(id) << " is gone: asking node "
                    << ToHex(owner.value()).substr(0, 12) << ", which submitted its task, for it";
  om_->transfer().CopyFrom(id, owner.value(), /*wait_ms=*/0);
  objects_.OnReady(id, [this, id] { AnsweredByOwner(id); });
}

void ObjectRequests::AnsweredByOwner(const std::string& id) {
  auto asked = asked_owner_.find(id);
  if (asked == asked_owner_.end()) return;
  if (asked->second.holds > 0) om_->Release(asked->second.lender, {id}, {asked->second.holds});
  asked_owner_.erase(asked);
}

void ObjectRequests::CompleteGet(const std::shared_ptr<PendingGet>& g) {
  if (g->done) return;
  g->done = true;
  if (g->has_deadline) {
    get_deadlines_.erase(g->deadline);
    g->has_deadline = false;
  }
  auto c = g->client.lock();
  if (!c || c->conn->closed()) return;
  // (A get left behind by a task that ended inside it must not unblock the worker's next lease.)
  if (g->blocked_worker && c->worker && c->worker->lease_seq == g->lease_seq) tasks_->OnWorkerUnblocked(c->worker);
  rpc::GetObjectsReply r;
  for (const auto& id : g->ids) {
    rpc::ObjectValue* v = r.add_objects();
    objects_.Describe(id, v, /*pin=*/true);
    if (v->state() == rpc::OBJ_IN_STORE) ++c->pins[id];
  }
  Clients::Reply(*c, rpc::GET_OBJECTS, g->request_id, r);
}

void ObjectRequests::HandleWait(const std::shared_ptr<Client>& c, uint64_t req, const rpc::WaitObjects& m) {
  auto w = std::make_shared<PendingWait>();
  w->client = c;
  w->request_id = req;
  w->ids.assign(m.object_ids().begin(), m.object_ids().end());
  w->needed = std::min<int>(m.num_returns(), static_cast<int>(w->ids.size()));
  w->fetch = !m.no_fetch();
  for (const auto& id : w->ids) w->ready += Counts(objects_, w->fetch, id) ? 1 : 0;
  if (w->ready >= w->needed) return CompleteWait(w);
  CheckCreators(w->ids);
  for (const auto& id : w->ids) {
    if (Counts(objects_, w->fetch, id)) continue;
    WhenCounts(objects_, w->fetch, id, [this, w] {
      if (++w->ready >= w->needed) CompleteWait(w);
    });
  }
  if (m.timeout_ms() >= 0 && !w->done) {
    w->timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(m.timeout_ms()));
    w->timer->async_wait([this, w](auto ec) {
      if (!ec) CompleteWait(w);
    });
  }
}

void ObjectRequests::CompleteWait(const std::shared_ptr<PendingWait>& w) {
  if (w->done) return;
  w->done = true;
  if (w->timer) w->timer->cancel();
  auto c = w->client.lock();
  if (!c || c->conn->closed()) return;
  rpc::WaitObjectsReply r;
  for (const auto& id : w->ids) {
    if (Counts(objects_, w->fetch, id)) r.add_ready_ids(id);
  }
  Clients::Reply(*c, rpc::WAIT_OBJECTS, w->request_id, r);
}

void ObjectRequests::HandleCreate(Client& c, uint64_t req, const rpc::CreateObject& m) {
  rpc::CreateObjectReply r;
  std::vector<std::string> contained(m.contained_ids().begin(), m.contained_ids().end());
  auto off = objects_.CreateInStore(m.object_id(), m.size(), std::move(contained));
  if (!off.ok()) {
    *r.mutable_status() = ToProto(off.status());
  } else {
    r.set_offset(off.value());
    c.creating.insert(m.object_id());
    if (m.hold()) Hold(c, m.object_id());
  }
  Clients::Reply(c, rpc::CREATE_OBJECT, req, r);
}

void ObjectRequests::HandleSeal(Client& c, const std::string& id) {
  if (!c.creating.erase(id)) return;
  Status st = objects_.SealInStore(id);
  if (!st.ok()) {
    PHALANX_LOG(Warning) << st.ToString();
    return;
  }
  const auto* e = om_->store().Find(id);
  if (e != nullptr) om_->ListInDirectory(id, e->size);  // else freed at once: nobody held it
}

void ObjectRequests::UnmapIdle() {
  constexpr auto kUnmapIdleEvery = std::chrono::milliseconds(20);
  auto now = std::chrono::steady_clock::now();
  if (now - unmap_idle_at_ < kUnmapIdleEvery) return;
  unmap_idle_at_ = now;
  clients_->ForEach([](Client& c) {
    bool maps = !c.pins.empty() || (c.worker != nullptr && !c.worker->pins.empty());
    if (maps && !c.conn->closed()) c.conn->Send(rpc::UNMAP_IDLE, 0, 0, rpc::Empty());
  });
}

void ObjectRequests::OnAdopted(const std::string& holder, const std::vector<std::string>& ids) {
  Client* h = clients_->Find(holder);
  if (h == nullptr) return;  // it exited: its holds went with it
  for (const auto& id : ids) {
    if (h->holds.erase(id)) objects_.RemoveRef(id);
  }
}

void ObjectRequests::HandlePutInline(Client& c, rpc::PutInline m) {
  if (m.hold()) Hold(c, m.object_id());
  std::vector<std::string> contained(m.contained_ids().begin(), m.contained_ids().end());
  objects_.PutInline(m.object_id(), std::move(*m.mutable_data()), std::move(contained));
}

void ObjectRequests::HandleRefs(Client& c, const rpc::UpdateRefs& m) {
  for (const auto& id : m.add()) Hold(c, id);
  for (const auto& id : m.remove()) {
    if (c.holds.erase(id)) objects_.RemoveRef(id);
  }
}

void ObjectRequests::HandleRelease(Client& c, const rpc::ObjectIds& m) {
  for (const auto& id : m.object_ids()) {
    auto* pins = &c.pins;
    auto it = pins->find(id);
    if (it == pins->end() && c.worker != nullptr) {
      pins = &c.worker->pins;
      it = pins->find(id);
    }
    if (it == pins->end()) continue;
    if (--it->second == 0) pins->erase(it);
    objects_.ReleasePin(id);
  }
}

void ObjectRequests::AddRoutes(Router& router) {
  using C = const std::shared_ptr<Client>&;
  router.OnClient(rpc::GET_OBJECTS, "get", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::GetObjects m;
    if (!ParseBody(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
    HandleGet(c, req, m);
    return true;
  });
  // A worker's get for results that come to it directly: its CPUs are lent while it sleeps, as in HandleGet.
  router.OnClient(rpc::WORKER_BLOCKED, "blocked", [this](C c, uint64_t, const char*, size_t) {
    if (c->worker != nullptr && !c->direct_blocked) {
      c->direct_blocked = true;
      c->direct_blocked_lease = c->worker->lease_seq;
      tasks_->OnWorkerBlocked(c->worker);
    }
    return true;
  });
  router.OnClient(rpc::WORKER_UNBLOCKED, "unblocked", [this](C c, uint64_t, const char*, size_t) {
    if (!c->direct_blocked) return true;
    c->direct_blocked = false;
    if (c->worker != nullptr && c->worker->lease_seq == c->direct_blocked_lease) tasks_->OnWorkerUnblocked(c->worker);
    return true;
  });
  router.OnClient(rpc::WAIT_OBJECTS, "wait", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::WaitObjects m;
    if (!ParseBody(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
    HandleWait(c, req, m);
    return true;
  });
  router.OnClient(rpc::CREATE_OBJECT, "create", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::CreateObject m;
    if (!ParseBody(&m, b, n) || !IsObjectId(m.object_id()) || !AllObjectIds(m.contained_ids())) return false;
    HandleCreate(*c, req, m);
    return true;
  });
  router.OnClient(rpc::SEAL_OBJECT, "seal", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::SealObject m;
    if (!ParseBody(&m, b, n) || !IsObjectId(m.object_id())) return false;
    HandleSeal(*c, m.object_id());
    return true;
  });
  router.OnClient(rpc::ABORT_CREATE, "abort", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::SealObject m;
    if (!ParseBody(&m, b, n) || !IsObjectId(m.object_id())) return false;
    if (c->creating.erase(m.object_id())) om_->table().AbortCreate(m.object_id());
    return true;
  });
  router.OnClient(rpc::PUT_INLINE, "put", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::PutInline m;
    if (!ParseBody(&m, b, n) || !IsObjectId(m.object_id()) || !AllObjectIds(m.contained_ids())) return false;
    HandlePutInline(*c, std::move(m));
    return true;
  });
  router.OnClient(rpc::RELEASE_OBJECTS, "release", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::ObjectIds m;
    if (!ParseBody(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
    HandleRelease(*c, m);
    return true;
  });
  router.OnClient(rpc::UPDATE_REFS, "reference update", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::UpdateRefs m;
    if (!ParseBody(&m, b, n) || !AllObjectIds(m.add()) || !AllObjectIds(m.remove())) return false;
    HandleRefs(*c, m);
    return true;
  });
  router.OnClient(rpc::FETCH_OBJECTS, "fetch", [this](C c, uint64_t, const char* b, size_t n) {
    rpc::FetchObjects m;
    if (!ParseBody(&m, b, n) || !AllObjectIds(m.object_ids()) || !AllObjectIds(m.borrowed_ids())) return false;
    HandleFetch(*c, m);
    return true;
  });
  router.OnClient(rpc::LEND_REFS, "lend", [this](C c, uint64_t req, const char* b, size_t n) {
    rpc::LendRefs m;
    if (!ParseBody(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
    Status st;
    if (m.node_id() == node_id_ || !peers_->IsAlive(m.node_id())) {
      st = Status::InvalidArgument("refs are lent to other live nodes only");
    } else {
      for (const auto& id : m.object_ids()) om_->HoldFor(m.node_id(), id);
    }
    Clients::Reply(*c, rpc::LEND_REFS, req, ToProto(st));
    return true;
  });
}

void ObjectRequests::HandleFetch(Client& c, const rpc::FetchObjects& m) {
  if (m.borrowed_ids_size() > 0 && m.node_id() != node_id_) {
    // Refs nested in a direct call from that node, held there for this
    // one: borrowed, then held for the client (which lets go by UPDATE_REFS).
    std::vector<std::string> borrowed(m.borrowed_ids().begin(), m.borrowed_ids().end());
    om_->Borrow(borrowed, m.node_id());
    for (const auto& id : borrowed) {
      Hold(c, id);
      om_->table().RemoveRef(id);
    }
  }
  std::vector<std::string> ids(m.object_ids().begin(), m.object_ids().end());
  for (const auto& id : ids) Hold(c, id);  // until the client lets go (UPDATE_REFS)
  if (m.node_id() != node_id_) om_->Fetch(ids, m.node_id());
}

}  // namespace phalanx::scheduler
