#include "scheduler/peer_manager.h"

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/process.h"
#include "core/status_proto.h"

namespace phalanx::scheduler {

namespace asio = boost::asio;

PeerManager::PeerManager(asio::io_context& io, std::string node_id, std::string node_ip, std::string token,
                         std::shared_ptr<const TlsContext> tls, int64_t dead_after_ms, ForwardedTasks* tasks,
                         NodeActors* actors, objectstore::ObjectManager* objects, GcsClient* gcs, const Router* router,
                         PeerEvents* events)
    : io_(io),
      node_id_(std::move(node_id)),
      node_ip_(std::move(node_ip)),
      token_(std::move(token)),
      tls_(std::move(tls)),
      tasks_(tasks),
      actors_(actors),
      objects_(objects),
      gcs_(gcs),
      router_(router),
      events_(events),
      view_(node_id_, dead_after_ms),
      acceptor_(io),
      accept_retry_(io) {}

void PeerManager::Connect(const std::string& node_id, std::function<void(Result<std::shared_ptr<RpcClient>>)> done) {
  const rpc::NodeInfo* node = view_.Find(node_id);
  if (node == nullptr) return done(Status::Unavailable("the node is not alive"));
  WithClient(*node, [done](std::shared_ptr<RpcClient> c, const Status& st) {
    if (!c) return done(st);
    done(c);
  });
}

void PeerManager::Call(const std::string& node_id, rpc::MessageType type, const google::protobuf::Message& m,
                           int64_t timeout_ms, std::function<void(Result<std::string>)> done) {
  const rpc::NodeInfo* node = view_.Find(node_id);
  if (node == nullptr) {  // gone (and so is whatever it held for us)
    if (done) done(Status::Unavailable("node " + ToHex(node_id).substr(0, 12) + " is not alive"));
    return;
  }
  std::shared_ptr<google::protobuf::Message> copy(m.New());
  copy->CopyFrom(m);
  WithClient(*node, [type, copy, timeout_ms, done](std::shared_ptr<RpcClient> c, const Status& st) {
    if (!c) {
      if (done) done(st);
      return;
    }
    c->Call(type, *copy, timeout_ms, [done](Result<std::string> r) {
      if (done) done(std::move(r));
    });
  });
}

Status PeerManager::Listen() {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(node_ip_, ec);
  if (ec) return Status::InvalidArgument("bad node address " + node_ip_);
  asio::ip::tcp::endpoint ep(addr, 0);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen for raylets on " + node_ip_ + ": " + ec.message());
  SetCloseOnExec(acceptor_.native_handle());
  port_ = acceptor_.local_endpoint().port();
  Accept();
  return Status::OK();
}

void PeerManager::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket sock) {
    if (stopped_) return;
    if (ec) {
      // Out of descriptors (a flood of connections): try again shortly rather than spin.
      PHALANX_LOG(Warning) << "accepting a raylet connection failed: " << ec.message();
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopped_) Accept();
      });
      return;
    }
    SetCloseOnExec(sock.native_handle());
    boost::system::error_code ignored;
    sock.set_option(asio::ip::tcp::no_delay(true), ignored);
    auto remote = sock.remote_endpoint(ignored);
    std::string address = remote.address().to_string();
    std::string peer = address + ":" + std::to_string(remote.port());
    FramedConnection::Socket g(io_);
    g.assign(asio::generic::stream_protocol(AF_INET, SOCK_STREAM), sock.release());
    auto conn = std::make_shared<FramedConnection>(std::move(g), "raylet at " + peer);
    conn->RequireAuth(Handshake::Role::kServer, token_, address);
    if (tls_) conn->UseTls(tls_);
    inbound_.push_back(conn);
    std::weak_ptr<FramedConnection> weak = conn;
    conn->Start(
        [this, weak](const FrameHeader& h, const char* body, size_t len) {
          if (auto c = weak.lock()) router_->PeerFrame(c, h, body, len);
        },
        [this, weak](const Status&) {
          auto c = weak.lock();
          inbound_.erase(std::remove(inbound_.begin(), inbound_.end(), c), inbound_.end());
        });
    Accept();
  });
}

void PeerManager::AddRoutes(Router& router) {
  router.OnPeer(rpc::PULL_OBJECT, "pull", [this](const char* b, size_t n, const PeerReply& reply) {
    rpc::PullObject m;
    if (!ParseBody(&m, b, n) || !IsObjectId(m.object_id())) return false;
    objects_->ServePull(m, reply.request_id(), [reply](OutFrame frame) { reply.Send(std::move(frame)); });
    return true;
  });
  router.OnPeer(rpc::RELEASE_HELD, "release", [this](const char* b, size_t n, const PeerReply& reply) {
    rpc::ReleaseHeld m;
    if (!ParseBody(&m, b, n) || !AllObjectIds(m.object_ids()) ||
        (m.counts_size() != 0 && m.counts_size() != m.object_ids_size())) {
      return false;
    }
    objects_->HandleReleaseHeld(m);
    reply(rpc::Status());
    return true;
  });
  router.OnPeer(rpc::CANCEL_TASK, "cancel", [this](const char* b, size_t n, const PeerReply& reply) {
    rpc::CancelTask m;
    if (!ParseBody(&m, b, n) || m.task_id().size() != kTaskIdSize) return false;
    tasks_->Cancel(m);
    reply(rpc::Status());
    return true;
  });
  router.OnPeer(rpc::KILL_ACTOR, "kill", [this](const char* b, size_t n, const PeerReply& reply) {
    auto answer = [reply](const Status& st) {
      rpc::KillActorReply r;
      *r.mutable_status() = ToProto(st);
      reply(r);
    };
    rpc::KillActor k;
    if (!ParseBody(&k, b, n)) {
      answer(Status::InvalidArgument("malformed kill"));
    } else {
      actors_->Kill(k.actor_id(), k.no_restart(), answer);
    }
    return true;
  });
  router.OnPeer(rpc::FORWARD_TASK, "forwarded task", [this](const char* b, size_t n, const PeerReply& reply) {
    rpc::ForwardTask m;
    if (!ParseBody(&m, b, n)) return false;
    Status valid = ValidateTaskSpec(m.spec());
    if (!valid.ok()) {  // told to the sender; nothing of it is kept
      rpc::ForwardTaskReply r;
      *r.mutable_status() = ToProto(valid);
      reply(r);
      return true;
    }
    HandleForward(reply, std::move(m));
    return true;
  });
}

void PeerManager::HandleForward(const PeerReply& answer, rpc::ForwardTask m) {
  rpc::TaskSpec spec = std::move(*m.mutable_spec());
  spec.set_forwarded(true);
  spec.set_origin_node(m.from_node());

  spec.set_caller_id("");
  auto returns = std::make_shared<std::vector<std::string>>();
  for (int i = 1; i <= spec.num_returns(); ++i) {
    returns->push_back(MakeObjectId(spec.task_id(), static_cast<uint32_t>(i)));
    objects_->table().AddRef(returns->back());  // held for the node that sent it, until sent back
  }
  auto waiting = std::make_shared<int>(static_cast<int>(returns->size()));
  std::string from = m.from_node();
  auto reply = [this, answer, returns, from] {
    rpc::ForwardTaskReply r;
    for (const auto& id : *returns) {
      rpc::ObjectValue v;
      objects_->table().Describe(id, &v, /*pin=*/false);
      if (v.state() == rpc::OBJ_INLINE) {
        auto* rv = r.add_returns();
        rv->set_object_id(id);
        rv->set_data(v.data());
        // Refs inside it are held here for the sender, which borrows them (a
        // generator's list of its items names items already on the sender's node).
        for (const auto& c : objects_->table().Contained(id)) {
          rv->add_contained_ids(c);
          objects_->HoldFor(from, c);
        }
      } else if (v.state() == rpc::OBJ_IN_STORE) {
        // Stays here, held for the sender, which copies it in chunks (never
        // one frame the size of the object) and then lets go (RELEASE_HELD).
        auto* rv = r.add_returns();
        rv->set_object_id(id);
        rv->set_in_store(true);
        rv->set_size(v.size());
        objects_->HoldFor(from, id);
      } else {
        *r.add_lost() = v;
      }
    }
    if (answer.open()) {
      answer(r);
    } else {  // the sender will not read it: nothing is held for this reply
      for (const auto& rv : r.returns()) {
        if (rv.in_store()) objects_->Unhold(from, rv.object_id(), 1);
        for (const auto& id : rv.contained_ids()) objects_->Unhold(from, id, 1);
      }
    }
    for (const auto& id : *returns) objects_->table().RemoveRef(id);
  };
  // Ref arguments still given by id are in the sending node's store: copy
  // them here (after Submit, whose hold keeps what arrives). Refs nested in
  // the arguments are held there for this node: borrowed, while the task
  // takes its own references to them.
  std::vector<std::string> pulls;
  for (const auto& a : spec.args()) {
    if (!a.object_id().empty()) pulls.push_back(a.object_id());
  }
  std::vector<std::string> borrowed(spec.contained_ids().begin(), spec.contained_ids().end());
  objects_->Borrow(borrowed, from);
  tasks_->Submit(std::move(spec));
  for (const auto& id : borrowed) objects_->table().RemoveRef(id);
  objects_->Fetch(pulls, m.from_node());
  if (returns->empty()) return reply();
  for (const auto& id : *returns) {
    objects_->table().OnReady(id, [waiting, reply] {
      if (--*waiting == 0) reply();
    });
  }
}

std::string PeerManager::Spill(const rpc::TaskSpec& forward, const ResourceSet& need) {
  const rpc::NodeInfo* node = nullptr;
  if (HasLabelSelector(forward)) {  // only to a node with the labels it asks for: its selectors in order
    node = view_.PickNode(need, &forward.label_selector());
    for (int i = 0; node == nullptr && i < forward.label_fallbacks_size(); ++i) {
      node = view_.PickNode(need, &forward.label_fallbacks(i).constraints());
    }
  } else {
    node = view_.PickNode(need);
  }
  if (node == nullptr) return "";
  view_.Reserve(node->node_id(), need);
  std::string id = node->node_id();
  Send(*node, forward);
  return id;
}

bool PeerManager::SpillTo(const std::string& node_id, const rpc::TaskSpec& forward) {
  const rpc::NodeInfo* node = view_.Find(node_id);
  if (node == nullptr) return false;
  Send(*node, forward);
  return true;
}

std::vector<std::pair<std::string, ResourceSet>> PeerManager::FreeElsewhere() const {
  std::vector<std::pair<std::string, ResourceSet>> out;
  for (const rpc::NodeInfo* n : view_.Others()) out.emplace_back(n->node_id(), view_.Free(*n));
  return out;
}

std::string PeerManager::NextSpreadNode() {
  auto others = view_.Others();
  uint64_t k = spread_counter_++ % (others.size() + 1);
  return k == 0 ? std::string() : others[k - 1]->node_id();
}

void PeerManager::WithClient(const rpc::NodeInfo& node,
                             std::function<void(std::shared_ptr<RpcClient>, const Status&)> fn) {
  std::string id = node.node_id();
  auto it = clients_.find(id);
  if (it != clients_.end() && !it->second->closed()) return fn(it->second, Status::OK());
  auto& queue = connecting_[id];
  queue.push_back(std::move(fn));
  if (queue.size() > 1) return;  // a connect is under way
  RpcClient::ConnectTcp(io_, node.address(), node.port(), 5000, token_, tls_, [this, id](Result<std::shared_ptr<RpcClient>> r) {
    auto waiting = std::move(connecting_[id]);
    connecting_.erase(id);
    if (r.ok()) {
      clients_[id] = r.value();
      r.value()->Start();
    } else {
      // Send nothing more its way until it heartbeats again (or is declared dead).
      view_.Suspect(id);
    }
    for (auto& f : waiting) f(r.ok() ? r.value() : nullptr, r.status());
  });
}

void PeerManager::Send(const rpc::NodeInfo& node, const rpc::TaskSpec& spec) {
  std::string desc = "node " + ToHex(node.node_id()).substr(0, 12) + " at " + node.address() + ":" +
                     std::to_string(node.port());
  // Refs nested in its arguments are held here for that node, which borrows them.
  for (const auto& id : spec.contained_ids()) objects_->HoldFor(node.node_id(), id);
  WithClient(node, [this, desc, spec, node_id = node.node_id()](std::shared_ptr<RpcClient> c, const Status& st) {
    if (!c) {
      for (const auto& id : spec.contained_ids()) objects_->Unhold(node_id, id, 1);
      tasks_->OnForwardFailed(spec.task_id(), desc + " is unreachable (" + st.message() + ")", /*reached=*/false);
      return;
    }
    Call(c, node_id, desc, spec);
  });
}

void PeerManager::KillActor(const std::string& node_id, const std::string& actor_id, bool no_restart,
                            std::function<void(const Status&)> done) {
  rpc::KillActor m;
  m.set_actor_id(actor_id);
  m.set_no_restart(no_restart);
  Call(node_id, rpc::KILL_ACTOR, m, 5000, [done = std::move(done)](Result<std::string> r) {
    if (!done) return;
    rpc::KillActorReply reply;
    if (!r.ok() || !reply.ParseFromString(r.value())) return done(Status::OK());  // (that node is gone, so is the actor)
    done(FromProto(reply.status()));
  });
}

void PeerManager::Call(const std::shared_ptr<RpcClient>& client, const std::string& node_id,
                       const std::string& node_desc, const rpc::TaskSpec& spec) {
  rpc::ForwardTask m;
  *m.mutable_spec() = spec;
  m.set_from_node(node_id_);
  std::string tid = spec.task_id();
  // No deadline: a task may run for hours. A dead node closes the connection
  // or stops its heartbeats, and either ends the call.
  std::vector<std::string> lent(spec.contained_ids().begin(), spec.contained_ids().end());
  client->Call(rpc::FORWARD_TASK, m, -1, [this, tid, node_id, node_desc, lent](Result<std::string> r) {
    if (!r.ok()) {
      tasks_->OnForwardFailed(tid, node_desc + " went away (" + r.status().message() + ")", /*reached=*/true);
      return;
    }
    rpc::ForwardTaskReply reply;
    if (!reply.ParseFromString(r.value())) {
      tasks_->OnForwardFailed(tid, node_desc + " sent a malformed result", /*reached=*/true);
      return;
    }
    if (reply.status().code() != 0) {
      for (const auto& id : lent) objects_->Unhold(node_id, id, 1);  // (it kept nothing)
      tasks_->OnForwardFailed(tid, node_desc + " refused it: " + reply.status().message(), /*reached=*/true);
      return;
    }
    // Results in that node's store stay there, held for this node, until
    // their bytes are needed here (a get, a wait with fetch_local, a task's
    // argument: ObjectTable::SetRemote), as a direct call's results do; then
    // they are copied in chunks and the drop handler lets go of them there.
    // (Copying every one at once moved a collective's inputs to the caller.)
    auto* returns = reply.mutable_returns();
    for (auto it = returns->begin(); it != returns->end();) {
      if (!IsObjectId(it->object_id()) || TaskIdOf(it->object_id()) != tid) {  // not one of this task's
        it = returns->erase(it);
        continue;
      }
      if (!it->in_store()) {
        ++it;
        continue;
      }
      if (!objects_->table().SetRemote(it->object_id(), node_id, it->size())) {
        objects_->Release(node_id, {it->object_id()});  // (here already)
      }
      it = returns->erase(it);
    }
    // Refs inside small results are held there for this node: borrowed,
    // while the results take their own references to them.
    std::vector<std::string> borrowed;
    for (const auto& rv : reply.returns()) borrowed.insert(borrowed.end(), rv.contained_ids().begin(), rv.contained_ids().end());
    objects_->Borrow(borrowed, node_id);
    tasks_->OnForwardedDone(tid, std::move(reply));
    for (const auto& id : borrowed) objects_->table().RemoveRef(id);
  });
}

static int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void PeerManager::Forgive() { view_.Forgive(SteadyMs()); }

void PeerManager::Refresh() {
  objects_->ReleaseIdle(std::chrono::steady_clock::now());
  auto beats = std::make_shared<std::unordered_map<std::string, std::string>>();
  gcs_->GetHeartbeats([beats](Result<std::unordered_map<std::string, std::string>> r) {
    if (r.ok()) *beats = std::move(r).value();
  });
  // (Redis answers in order: the heartbeats are in before the nodes' reply runs.)
  gcs_->GetAllNodes([this, beats](Result<std::vector<rpc::NodeInfo>> r) {
    if (!r.ok() || stopped_) return;
    int64_t now_ms = SteadyMs();
    view_.Update(r.value(), *beats, now_ms);
    tasks_->Redispatch();  // queued tasks may fit elsewhere now
    // Nodes another raylet declared dead first: their actors' fate is ours to settle too.
    for (const auto& n : r.value()) {
      if (n.alive() || n.node_id() == node_id_ || !marked_dead_.insert(n.node_id()).second) continue;
      SettleDeadNode(n);
    }
    for (const auto& n : view_.Silent()) {
      if (!marked_dead_.insert(n.node_id()).second) continue;
      PHALANX_LOG(Warning) << "node " << ToHex(n.node_id()).substr(0, 12) << " at " << n.address()
                           << " sent no heartbeat for " << view_.dead_after_ms() / 1000 << " s or more: marking it dead";
      gcs_->MarkNodeDead(n);
      SettleDeadNode(n);
      auto c = clients_.find(n.node_id());
      if (c != clients_.end()) {
        c->second->Close(Status::Unavailable("node " + ToHex(n.node_id()).substr(0, 12) + " stopped heartbeating"));
        clients_.erase(c);
      }
    }
  });
}

void PeerManager::SettleDeadNode(const rpc::NodeInfo& n) {
  std::string why = "node " + ToHex(n.node_id()).substr(0, 12) + " at " + n.address() + " died";
  objects_->NodeDied(n.node_id());  // nobody is left to ask for what was held for it
  events_->OnNodeDead(n.node_id());
  actors_->OnNodeDead(n.node_id(), why);
  RestartOrphans(n.node_id(), why);
}

void PeerManager::RestartOrphans(const std::string& dead_node, const std::string& why) {
  gcs_->GetAllActors([this, dead_node, why](Result<std::vector<rpc::ActorInfo>> all) {
    if (!all.ok() || stopped_) return;
    for (const auto& a : all.value()) {
      // Only detached actors hosted by the dead node and owned by it or by
      // another dead node (the host died before its adoption of the actor,
      // ActorManager::OnNodeDead, reached the GCS): for the others, the
      // owner restarts them (HostLost) or they die with it.
      bool owner_dead = a.owner_node() == dead_node || marked_dead_.count(a.owner_node()) > 0;
      if (a.node_id() != dead_node || a.state() == rpc::ACTOR_DEAD || !a.detached() || !owner_dead ||
          a.creation_spec().empty()) {
        continue;
      }
      // Every live node sees it; one wins the claim and restarts it.
      std::string key = "restart:" + ToHex(a.actor_id()) + ":" + std::to_string(a.restarts());
      gcs_->Claim(key, [this, a, why](Result<bool> won) {
        if (won.ok() && won.value() && !stopped_) actors_->RestartOrphan(a, why);
      });
    }
  });
}

void PeerManager::Stop() {
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  // Closing runs close handlers that edit these containers: iterate copies.
  auto clients = std::move(clients_);
  clients_.clear();
  for (auto& [id, c] : clients) c->Close(Status::Unavailable("this raylet is stopping"));
  auto inbound = std::move(inbound_);
  inbound_.clear();
  for (auto& c : inbound) c->Close();
}

}  // namespace phalanx::scheduler
