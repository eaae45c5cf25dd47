// CoreWorker's direct actor calls (see "Actor method calls go straight to
// the actor's worker" in core_worker.h): the caller side (routes, the
// connection to each actor's worker, results coming back, hand-over to the
// raylet when a connection breaks) and the actor's side (its listener, calls
// injected into NextTask, results written back to each caller).
#include <algorithm>
#include <unordered_set>

#include "core/core_worker.h"
#include "core/ids.h"
#include "core/logging.h"
#include "core/status_proto.h"

namespace phalanx {

// Store-sized results stay in this node's store, held by this worker, for
// callers on other nodes too: their raylet copies them in ranges (the
// transfer layer) and then tells this node to let go (RELEASE_HELD).
uint64_t CoreWorker::ReturnInlineLimit() { return inline_threshold_; }

bool CoreWorker::ReturnsHeld(const std::string& task_id) {
  std::lock_guard<std::mutex> l(server_mu_);
  return running_direct_.count(task_id) > 0;
}

size_t CoreWorker::ActorCallsInFlight(const std::string& actor_id, size_t limit) {
  std::vector<std::string> asked;
  {
    std::lock_guard<std::mutex> l(routes_mu_);
    ActorRoute& r = routes_[actor_id];
    r.count_raylet_calls = true;
    size_t n = r.inflight.size() + r.raylet_calls.size();
    if (n < limit || r.raylet_calls.empty()) return n;
    asked = r.raylet_calls;
  }
  // At the limit with calls through the raylet: which of those are done?
  auto ready = Wait(asked, static_cast<int>(asked.size()), 0, /*fetch_local=*/false);
  std::lock_guard<std::mutex> l(routes_mu_);
  ActorRoute& r = routes_[actor_id];
  if (ready.ok()) {
    std::unordered_set<std::string> done(ready.value().begin(), ready.value().end());
    r.raylet_calls.erase(std::remove_if(r.raylet_calls.begin(), r.raylet_calls.end(),
                                        [&](const std::string& id) { return done.count(id) > 0; }),
                         r.raylet_calls.end());
  }
  return r.inflight.size() + r.raylet_calls.size();
}

bool CoreWorker::ActorCallsPending(const std::string& actor_id) {
  std::string last;
  {
    std::lock_guard<std::mutex> l(routes_mu_);
    auto it = routes_.find(actor_id);
    if (it == routes_.end()) return false;
    if (!it->second.inflight.empty()) return true;
    if (it->second.conn != 0 || it->second.last_raylet_call.empty()) return false;
    last = it->second.last_raylet_call;
  }
  rpc::ActorRoute q;
  q.set_actor_id(actor_id);
  q.add_task_ids(last);
  auto f = Call(rpc::ACTOR_ROUTE, q, 10000);
  rpc::ActorRouteReply a;
  if (!f.ok() || !a.ParseFromString(f.value().body)) return true;  // (not known: ask again later)
  return a.status().code() == 0 && a.state() != rpc::ACTOR_DEAD && !a.calls_done();
}

void CoreWorker::FlushDirect() {
  std::lock_guard<std::mutex> l(io_mu_);
  if (io_) io_->Flush();
}

Status CoreWorker::ReleaseHeldReturns(const rpc::TaskDone& done) {
  rpc::UpdateRefs m;
  for (const auto& r : done.returns()) {
    if (r.in_store()) m.add_remove(r.object_id());
  }
  return Send(rpc::UPDATE_REFS, m);
}

DirectIo* CoreWorker::Io() {
  std::lock_guard<std::mutex> l(io_mu_);
  if (!io_) {
    io_ = std::make_unique<DirectIo>(cluster_token_, tls_,
                                     [this](uint64_t conn, std::vector<Frame>& f) { OnDirectFrames(conn, f); },
                                     [this](uint64_t conn, const Status& why) { OnDirectClose(conn, why); });
  }
  return io_.get();
}

Status CoreWorker::StartDirectServer(rpc::TaskDone* done) {
  {
    std::lock_guard<std::mutex> l(server_mu_);
    if (serving_) return Status::OK();
    serving_ = true;
  }
  DirectIo* io = Io();
  // Callers on this node use a Unix socket (faster); others TCP on the node's address.
  std::string path = session_dir_ + "/actor-" + ToHex(client_id_) + ".sock";
  if (!session_dir_.empty() && io->ListenUnix(path).ok()) done->set_direct_socket(path);
  if (!node_address_.empty()) {
    auto port = io->ListenTcp(node_address_);
    if (!port.ok()) return port.status();
    done->set_direct_host(node_address_);
    done->set_direct_port(port.value());
  }
  return Status::OK();
}

Status CoreWorker::SubmitActorCall(rpc::TaskSpec spec) {
  const std::string actor = spec.actor_id();
  std::string actor_node;
  {
    std::lock_guard<std::mutex> l(routes_mu_);
    ActorRoute& r = routes_[actor];
    if (r.conn == 0 && options_.direct_actor_calls) MaybeGoDirect(actor, r);
    bool has_refs = spec.contained_ids_size() > 0;
    for (const auto& a : spec.args()) has_refs = has_refs || !a.object_id().empty();
    if (!(r.conn != 0 && r.remote && has_refs)) return SendActorCallLocked(r, std::move(spec));
    actor_node = r.node_id;
  }
  // The actor's node cannot read this node's objects by id: small values
  // travel with the call, store objects are copied by the actor's raylet.
  // (Outside the lock: the values may be results that other direct calls bring.)
  PHALANX_RETURN_IF_ERROR(InlineRefArgs(&spec, actor_node));
  std::lock_guard<std::mutex> l(routes_mu_);
  return SendActorCallLocked(routes_[actor], std::move(spec));
}

Status CoreWorker::InlineRefArgs(rpc::TaskSpec* spec, const std::string& actor_node) {
  const std::string where = spec->function_name() + " (an actor on another node)";
  std::vector<std::string> ids;
  for (const auto& a : spec->args()) {
    if (!a.object_id().empty()) ids.push_back(a.object_id());
  }
  PHALANX_ASSIGN_OR_RETURN(auto values, Get(ids, -1, /*locate_only=*/true));
  size_t k = 0;
  Status st;
  for (auto& a : *spec->mutable_args()) {
    if (a.object_id().empty()) continue;
    const rpc::ObjectValue& v = values[k++];
    if (v.state() == rpc::OBJ_INLINE) {
      a.set_data(v.data());
      a.clear_object_id();
      for (const auto& c : v.contained_ids()) spec->add_contained_ids(c);  // (travel with it)
    } else if (v.state() == rpc::OBJ_IN_STORE || v.state() == rpc::OBJ_PENDING) {
      // Stays a ref: the actor's node copies it from this one, or (PENDING:
      // held on another node, an allreduce's result say) from wherever the
      // object directory says it is, maybe the actor's node itself.
      if (v.state() == rpc::OBJ_IN_STORE) Release(v.object_id());
      spec->set_origin_node(node_id_);
    } else {
      st = Status(static_cast<StatusCode>(v.error_code()), "an argument of " + where + " is lost: " + v.error());
    }
  }
  PHALANX_RETURN_IF_ERROR(st);
  if (spec->contained_ids_size() > 0) {
    // Refs nested in the arguments: this node's raylet holds each for the
    // actor's node (before the call can arrive there), whose raylet borrows
    // them when the actor's worker says so (FETCH_OBJECTS.borrowed_ids).
    rpc::LendRefs m;
    m.set_node_id(actor_node);
    for (const auto& c : spec->contained_ids()) m.add_object_ids(c);
    PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::Status>(rpc::LEND_REFS, m, 10000, "lend"));
    PHALANX_RETURN_IF_ERROR(FromProto(r));
    spec->set_origin_node(node_id_);
  }
  return Status::OK();
}

void CoreWorker::MaybeGoDirect(const std::string& actor_id, ActorRoute& r) {
  auto now = Clock::now();
  if (now < r.next_lookup) return;
  // Ask again soon while only the caller's own raylet-path calls hold the
  // switch back (they finish at the actor's pace), slower while it is not alive.
  auto later = [&](std::chrono::milliseconds cap = std::chrono::milliseconds(50)) {
    r.next_lookup = Clock::now() + std::min(r.backoff, cap);
    r.backoff = std::min(r.backoff * 2, std::chrono::milliseconds(50));
  };
  rpc::ActorRoute q;
  q.set_actor_id(actor_id);
  if (!r.last_raylet_call.empty()) q.add_task_ids(r.last_raylet_call);
  auto f = Call(rpc::ACTOR_ROUTE, q, 10000);
  rpc::ActorRouteReply a;
  if (!f.ok() || !a.ParseFromString(f.value().body) || a.status().code() != 0) return later();
  if (a.state() == rpc::ACTOR_DEAD || a.calls_done()) r.last_raylet_call.clear();
  if (a.state() != rpc::ACTOR_ALIVE) return later();
  if (!a.calls_done()) return later(std::chrono::milliseconds(4));
  bool same_node = a.node_id() == node_id_;
  Result<uint64_t> conn = Status::Unavailable("the actor's worker gave no address");
  if (same_node && !a.worker_socket().empty()) {
    conn = Io()->ConnectUnix(a.worker_socket(), 2000);
  } else if (a.worker_port() > 0) {
    conn = Io()->ConnectTcp(a.worker_host(), a.worker_port(), 2000);
  }
  if (!conn.ok()) return later();
  rpc::DirectHello hello;  // (the connection authenticated already: DirectIo's handshake)
  hello.set_caller_id(client_id_);
  hello.set_node_id(node_id_);
  if (!Io()->Send(conn.value(), EncodeFrame(rpc::DIRECT_HELLO, 0, 0, hello)).ok()) return later();
  r.conn = conn.value();
  r.remote = !same_node;
  r.node_id = a.node_id();
  r.incarnation = a.incarnation();
  r.backoff = std::chrono::milliseconds(1);
  conn_actor_[r.conn] = actor_id;
}

Status CoreWorker::SendActorCallLocked(ActorRoute& r, rpc::TaskSpec spec) {
  if (r.conn == 0) {
    r.last_raylet_call = spec.task_id();
    if (r.count_raylet_calls && spec.num_returns() > 0) {
      r.raylet_calls.push_back(MakeObjectId(spec.task_id(), 1));
    }
    return Send(rpc::SUBMIT_TASK, spec);
  }
  const std::string tid = spec.task_id();
  DirectCall call;
  for (const auto& a : spec.args()) {
    if (!a.object_id().empty()) call.arg_refs.push_back(a.object_id());
  }
  // Refs nested in the arguments too: the caller may drop its own refs the
  // moment .remote() returns, and the actor reads them later.
  for (const auto& id : spec.contained_ids()) call.arg_refs.push_back(id);
  for (const auto& id : call.arg_refs) AddLocalRef(id);
  {
    std::lock_guard<std::mutex> l(refs_mu_);
    for (int i = 1; i <= spec.num_returns(); ++i) direct_pending_.insert(MakeObjectId(tid, static_cast<uint32_t>(i)));
  }
  rpc::ExpectReturns e;
  e.add_task_ids(tid);
  e.add_num_returns(spec.num_returns());
  if (spec.generator() == rpc::GENERATOR_STREAMING) e.add_streams(tid);
  if (spec.generator() == rpc::GENERATOR_DYNAMIC) e.add_dynamic_streams(tid);
  PHALANX_RETURN_IF_ERROR(Send(rpc::EXPECT_RETURNS, e));
  rpc::PushTask push;
  *push.mutable_spec() = std::move(spec);
  std::string frame = EncodeFrame(rpc::DIRECT_CALL, 0, 0, push);
  call.spec = std::move(*push.mutable_spec());  // kept for a hand-over to the raylet
  direct_calls_[tid] = std::move(call);
  r.inflight.push_back(tid);
  ++direct_calls_sent_;
  // A lone call goes at once; one made while others are in flight is written
  // with the calls after it (within ~200 us, or at the next get). A failed
  // write closes the connection, whose close hands the call to the raylet.
  if (r.inflight.size() == 1) {
    (void)Io()->Send(r.conn, frame);
  } else {
    Io()->SendLater(r.conn, frame);
  }
  return Status::OK();
}

void CoreWorker::OnDirectFrames(uint64_t conn, std::vector<Frame>& frames) {
  std::vector<rpc::TaskDone> done;
  std::vector<Frame> calls;
  for (auto& f : frames) {
    switch (f.header.type) {
      case rpc::DIRECT_DONE: {
        done.emplace_back();
        if (!done.back().ParseFromString(f.body)) {
          PHALANX_LOG(Warning) << "malformed result on a direct actor connection; closing it";
          return Io()->Close(conn);
        }
        if (done.back().item()) {  // a generator's item: the call goes on; the raylet keeps it for us
          (void)Send(rpc::DIRECT_RESULTS, done.back());
          done.pop_back();
        }
        break;
      }
      case rpc::DIRECT_HELLO: {
        rpc::DirectHello hello;
        if (!hello.ParseFromString(f.body)) {
          PHALANX_LOG(Warning) << "malformed hello on a direct connection; closing it";
          return Io()->Close(conn);
        }
        std::lock_guard<std::mutex> l(server_mu_);
        callers_[conn] = hello.node_id();
        break;
      }
      case rpc::CANCEL_TASK: {
        rpc::CancelTask m;
        {
          std::lock_guard<std::mutex> l(server_mu_);
          if (!callers_.count(conn) || !m.ParseFromString(f.body)) {
            PHALANX_LOG(Warning) << "a malformed or early cancel on a direct connection; closing it";
            return Io()->Close(conn);
          }
        }
        NoteCancel(m.task_id(), false);
        // Its children were submitted to this node's raylet, which cancels them.
        if (m.recursive()) (void)SendNow(rpc::CANCEL_TASK, m);
        calls.push_back(std::move(f));  // (NextTask passes the notice on)
        break;
      }
      case rpc::DIRECT_CALL: {
        {
          std::lock_guard<std::mutex> l(server_mu_);
          if (!callers_.count(conn)) {
            PHALANX_LOG(Warning) << "a direct call before the caller said hello; closing its connection";
            return Io()->Close(conn);
          }
        }
        f.header.request_id = conn;  // (NextTask parses and checks it)
        calls.push_back(std::move(f));
        break;
      }
      default:
        PHALANX_LOG(Warning) << "unexpected frame type " << f.header.type << " on a direct connection";
        return Io()->Close(conn);
    }
  }
  if (!calls.empty()) conn_->InjectPush(calls);
  if (!done.empty()) OnDirectDone(done);
}

void CoreWorker::OnDirectDone(std::vector<rpc::TaskDone>& done) {
  std::vector<std::string> arg_refs;
  {
    std::lock_guard<std::mutex> l(routes_mu_);
    for (auto d = done.begin(); d != done.end();) {
      auto it = direct_calls_.find(d->task_id());
      if (it == direct_calls_.end()) {  // handed to the raylet already
        d = done.erase(d);
        continue;
      }
      for (auto& a : it->second.arg_refs) arg_refs.push_back(std::move(a));
      auto r = routes_.find(it->second.spec.actor_id());
      if (r != routes_.end()) {
        auto& q = r->second.inflight;
        auto pos = std::find(q.begin(), q.end(), d->task_id());
        if (pos != q.end()) q.erase(pos);
      }
      direct_calls_.erase(it);
      ++d;
    }
  }
  if (done.empty()) return;
  // To the raylet first: a getter woken below may ask it for a store result.
  for (const auto& d : done) (void)Send(rpc::DIRECT_RESULTS, d);
  {
    std::lock_guard<std::mutex> l(refs_mu_);
    for (auto& d : done) {
      for (auto& r : *d.mutable_returns()) {
        // Cached even when the ref is not adopted yet (the result can beat the
        // submitter's bookkeeping), not when its last ref is gone already.
        if (!r.in_store() && r.data().size() <= inline_threshold_ && direct_pending_.count(r.object_id())) {
          local_values_[r.object_id()] = std::move(*r.mutable_data());
        }
        direct_pending_.erase(r.object_id());
      }
    }
  }
  direct_cv_.notify_all();
  for (const auto& id : arg_refs) RemoveLocalRef(id);
}

void CoreWorker::OnDirectClose(uint64_t conn, const Status& why) {
  bool caller_gone;
  {
    std::lock_guard<std::mutex> l(server_mu_);
    caller_gone = callers_.erase(conn) > 0;
  }
  if (caller_gone) {  // a caller of this actor went away: its calls not started go too (it hands them to the raylet)
    for (auto& c : held_->DropCaller(conn)) {
      for (const auto& v : c.task.ref_args()) {
        if (v.state() == rpc::OBJ_IN_STORE) Release(v.object_id());
      }
      ReleaseDirectArgs(c.fetched, c.borrowed);
    }
    return;
  }
  std::vector<DirectCall> handed;
  {
    std::lock_guard<std::mutex> l(routes_mu_);
    auto a = conn_actor_.find(conn);
    if (a == conn_actor_.end()) return;
    std::string actor = a->second;
    conn_actor_.erase(a);
    ActorRoute& r = routes_[actor];
    r.conn = 0;
    r.next_lookup = Clock::now() + std::chrono::milliseconds(5);
    // The raylet decides what happens to the calls in flight: retried on the
    // restarted actor (max_task_retries) or failed with ActorDiedError.
    for (const auto& tid : r.inflight) {
      auto it = direct_calls_.find(tid);
      if (it == direct_calls_.end()) continue;
      rpc::TaskSpec spec = it->second.spec;
      spec.set_interrupted(true);
      spec.set_incarnation(r.incarnation);
      spec.set_returns_held(true);
      (void)Send(rpc::SUBMIT_TASK, spec);
      r.last_raylet_call = tid;
      handed.push_back(std::move(it->second));
      direct_calls_.erase(it);
    }
    r.inflight.clear();
    if (!handed.empty()) {
      PHALANX_LOG(Info) << "connection to actor " << ToHex(actor).substr(0, 12) << " closed ("
                        << why.message() << "): " << handed.size() << " calls in flight handed to the raylet";
    }
  }
  {
    std::lock_guard<std::mutex> l(refs_mu_);
    for (const auto& c : handed) {
      for (int i = 1; i <= c.spec.num_returns(); ++i) {
        direct_pending_.erase(MakeObjectId(c.spec.task_id(), static_cast<uint32_t>(i)));
      }
    }
  }
  direct_cv_.notify_all();
  for (const auto& c : handed) {
    for (const auto& id : c.arg_refs) RemoveLocalRef(id);
  }
}

}  // namespace phalanx
