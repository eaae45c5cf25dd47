#include "worker/direct_caller.h"

#include <algorithm>
#include <unordered_set>

#include "core/ids.h"
#include "core/logging.h"
#include "core/status_proto.h"

namespace phalanx {

DirectCaller::DirectCaller(const WorkerIdentity& me, bool enabled, RayletChannel* raylet, RefCounter* refs,
                           WorkerObjects* objects, DirectIo* io)
    : me_(me), enabled_(enabled), raylet_(raylet), refs_(refs), objects_(objects), io_(io) {}

size_t DirectCaller::CallsInFlight(const std::string& actor_id, size_t limit) {
  std::vector<std::string> asked;
  {
    std::lock_guard<std::mutex> l(mu_);
    Route& r = routes_[actor_id];
    r.count_raylet_calls = true;
    size_t n = r.inflight.size() + r.raylet_calls.size();
    if (n < limit || r.raylet_calls.empty()) return n;
    asked = r.raylet_calls;
  }
  // At the limit with calls through the raylet: which of those are done?
  auto ready = objects_->Wait(asked, static_cast<int>(asked.size()), 0, /*fetch_local=*/false);
  std::lock_guard<std::mutex> l(mu_);
  Route& r = routes_[actor_id];
  if (ready.ok()) {
    std::unordered_set<std::string> done(ready.value().begin(), ready.value().end());
    r.raylet_calls.erase(std::remove_if(r.raylet_calls.begin(), r.raylet_calls.end(),
                                        [&](const std::string& id) { return done.count(id) > 0; }),
                         r.raylet_calls.end());
  }
  return r.inflight.size() + r.raylet_calls.size();
}

bool DirectCaller::CallsPending(const std::string& actor_id) {
  std::string last;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = routes_.find(actor_id);
    if (it == routes_.end()) return false;
    if (!it->second.inflight.empty()) return true;
    if (it->second.conn != 0 || it->second.last_raylet_call.empty()) return false;
    last = it->second.last_raylet_call;
  }
  auto a = AskRoute(actor_id, last);
  if (!a.ok()) return true;  // (not known: ask again later)
  return a.value().status().code() == 0 && a.value().state() != rpc::ACTOR_DEAD && !a.value().calls_done();
}

Result<rpc::ActorRouteReply> DirectCaller::AskRoute(const std::string& actor_id, const std::string& last_call) {
  rpc::ActorRoute q;
  q.set_actor_id(actor_id);
  if (!last_call.empty()) q.add_task_ids(last_call);
  PHALANX_ASSIGN_OR_RETURN(Frame f, raylet_->Call(rpc::ACTOR_ROUTE, q, 10000));
  rpc::ActorRouteReply a;
  if (!a.ParseFromString(f.body)) return Status::Unavailable("malformed actor route reply");
  return a;
}

std::optional<Status> DirectCaller::CancelDirect(const rpc::CancelTask& m) {
  std::lock_guard<std::mutex> l(mu_);
  auto call = calls_.find(m.task_id());
  if (call == calls_.end()) return std::nullopt;
  auto r = routes_.find(call->second.spec.actor_id());
  if (r == routes_.end() || r->second.conn == 0) return std::nullopt;
  std::lock_guard<std::mutex> s(send_mu_);  // (after the call it cancels)
  return io_->Send(r->second.conn, EncodeFrame(rpc::CANCEL_TASK, 0, 0, m));
}

Status DirectCaller::Submit(rpc::TaskSpec spec) {
  const std::string actor = spec.actor_id();
  std::string actor_node;
  {
    std::unique_lock<std::mutex> l(mu_);
    Route& r = routes_[actor];
    if (r.conn == 0 && enabled_) MaybeGoDirect(actor, r);
    bool has_refs = spec.contained_ids_size() > 0;
    for (const auto& a : spec.args()) has_refs = has_refs || !a.object_id().empty();
    if (!(r.conn != 0 && r.remote && has_refs)) return Send(r, std::move(spec), l);
    actor_node = r.node_id;
  }
  // The actor's node cannot read this node's objects by id: small values
  // travel with the call, store objects are copied by the actor's raylet.
  // (Outside the lock: the values may be results that other direct calls bring.)
  PHALANX_RETURN_IF_ERROR(InlineRefArgs(&spec, actor_node));
  std::unique_lock<std::mutex> l(mu_);
  return Send(routes_[actor], std::move(spec), l);
}

Status DirectCaller::InlineRefArgs(rpc::TaskSpec* spec, const std::string& actor_node) {
  const std::string where = spec->function_name() + " (an actor on another node)";
  std::vector<std::string> ids;
  for (const auto& a : spec->args()) {
    if (!a.object_id().empty()) ids.push_back(a.object_id());
  }
  PHALANX_ASSIGN_OR_RETURN(auto values, objects_->Get(ids, -1, /*locate_only=*/true));
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
      if (v.state() == rpc::OBJ_IN_STORE) objects_->Release(v.object_id());
      spec->set_origin_node(me_.node_id);
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
    PHALANX_ASSIGN_OR_RETURN(auto r, raylet_->CallFor<rpc::Status>(rpc::LEND_REFS, m, 10000, "lend"));
    PHALANX_RETURN_IF_ERROR(FromProto(r));
    spec->set_origin_node(me_.node_id);
  }
  return Status::OK();
}

void DirectCaller::MaybeGoDirect(const std::string& actor_id, Route& r) {
  auto now = Clock::now();
  if (now < r.next_lookup) return;
  // Ask again soon while only the caller's own raylet-path calls hold the
  // switch back (they finish at the actor's pace), slower while it is not alive.
  auto later = [&](std::chrono::milliseconds cap = std::chrono::milliseconds(50)) {
    r.next_lookup = Clock::now() + std::min(r.backoff, cap);
    r.backoff = std::min(r.backoff * 2, std::chrono::milliseconds(50));
  };
  auto asked = AskRoute(actor_id, r.last_raylet_call);
  if (!asked.ok() || asked.value().status().code() != 0) return later();
  const rpc::ActorRouteReply& a = asked.value();
  if (a.state() == rpc::ACTOR_DEAD || a.calls_done()) r.last_raylet_call.clear();
  if (a.state() != rpc::ACTOR_ALIVE) return later();
  if (!a.calls_done()) return later(std::chrono::milliseconds(4));
  bool same_node = a.node_id() == me_.node_id;
  Result<uint64_t> conn = Status::Unavailable("the actor's worker gave no address");
  if (same_node && !a.worker_socket().empty()) {
    conn = io_->ConnectUnix(a.worker_socket(), 2000);
  } else if (a.worker_port() > 0) {
    conn = io_->ConnectTcp(a.worker_host(), a.worker_port(), 2000);
  }
  if (!conn.ok()) return later();
  rpc::DirectHello hello;  // (the connection authenticated already: DirectIo's handshake)
  hello.set_caller_id(me_.client_id);
  hello.set_node_id(me_.node_id);
  if (!io_->Send(conn.value(), EncodeFrame(rpc::DIRECT_HELLO, 0, 0, hello)).ok()) return later();
  r.conn = conn.value();
  r.remote = !same_node;
  r.node_id = a.node_id();
  r.incarnation = a.incarnation();
  r.backoff = std::chrono::milliseconds(1);
  conn_actor_[r.conn] = actor_id;
}

Status DirectCaller::Send(Route& r, rpc::TaskSpec spec, std::unique_lock<std::mutex>& l) {
  if (r.conn == 0) {
    r.last_raylet_call = spec.task_id();
    if (r.count_raylet_calls && spec.num_returns() > 0) {
      r.raylet_calls.push_back(MakeObjectId(spec.task_id(), 1));
    }
    return raylet_->Send(rpc::SUBMIT_TASK, spec);
  }
  const std::string tid = spec.task_id();
  Call call;
  for (const auto& a : spec.args()) {
    if (!a.object_id().empty()) call.arg_refs.push_back(a.object_id());
  }
  // Refs nested in the arguments too: the caller may drop its own refs the
  // moment .remote() returns, and the actor reads them later.
  for (const auto& id : spec.contained_ids()) call.arg_refs.push_back(id);
  for (const auto& id : call.arg_refs) objects_->AddLocalRef(id);
  std::vector<std::string> returns;
  for (int i = 1; i <= spec.num_returns(); ++i) returns.push_back(MakeObjectId(tid, static_cast<uint32_t>(i)));
  refs_->ExpectDirect(returns);
  rpc::ExpectReturns e;
  e.add_task_ids(tid);
  e.add_num_returns(spec.num_returns());
  if (spec.generator() == rpc::GENERATOR_STREAMING) e.add_streams(tid);
  if (spec.generator() == rpc::GENERATOR_DYNAMIC) e.add_dynamic_streams(tid);
  PHALANX_RETURN_IF_ERROR(raylet_->SendLazy(rpc::EXPECT_RETURNS, e));  // (before anything of ours that needs it)
  rpc::PushTask push;
  *push.mutable_spec() = std::move(spec);
  std::string frame = EncodeFrame(rpc::DIRECT_CALL, 0, 0, push);
  call.spec = std::move(*push.mutable_spec());  // kept for a hand-over to the raylet
  calls_[tid] = std::move(call);
  r.inflight.push_back(tid);
  ++calls_sent_;
  // A lone call goes at once; one made while others are in flight is written
  // with the calls after it (within ~200 us, or at the next get). A failed
  // write closes the connection, whose close hands the call to the raylet.
  uint64_t conn = r.conn;
  std::lock_guard<std::mutex> s(send_mu_);
  if (r.inflight.size() > 1) {
    io_->SendLater(conn, frame);
    return Status::OK();
  }
  l.unlock();
  (void)io_->Send(conn, frame);
  return Status::OK();
}

void DirectCaller::OnResults(uint64_t conn, const std::vector<Frame>& frames) {
  std::vector<rpc::TaskDone> done;
  for (const auto& f : frames) {
    done.emplace_back();
    if (!done.back().ParseFromString(f.body)) {
      PHALANX_LOG(Warning) << "malformed result on a direct actor connection; closing it";
      return io_->Close(conn);
    }
    if (done.back().item()) {  // a generator's item: the call goes on; the raylet keeps it for us
      (void)raylet_->Send(rpc::DIRECT_RESULTS, done.back());
      done.pop_back();
    }
  }
  std::vector<std::string> arg_refs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto d = done.begin(); d != done.end();) {
      auto it = calls_.find(d->task_id());
      if (it == calls_.end()) {  // handed to the raylet already
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
      calls_.erase(it);
      ++d;
    }
  }
  if (done.empty()) return;
  // To the raylet first: a getter woken below may ask it for a store result.
  // (lazily: this process's own requests take them first, in order; a reduce awaiting them, at once)
  for (const auto& d : done) (void)raylet_->SendLazy(rpc::DIRECT_RESULTS, d);
  if (refs_->DirectResultsCame(&done, me_.inline_threshold)) (void)raylet_->Flush();  // a reduce waits for them
  for (const auto& id : arg_refs) objects_->RemoveLocalRef(id);
}

bool DirectCaller::OnClose(uint64_t conn, const Status& why) {
  std::vector<Call> handed;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto a = conn_actor_.find(conn);
    if (a == conn_actor_.end()) return false;
    std::string actor = a->second;
    conn_actor_.erase(a);
    Route& r = routes_[actor];
    r.conn = 0;
    r.next_lookup = Clock::now() + std::chrono::milliseconds(5);
    // The raylet decides what happens to the calls in flight: retried on the
    // restarted actor (max_task_retries) or failed with ActorDiedError.
    for (const auto& tid : r.inflight) {
      auto it = calls_.find(tid);
      if (it == calls_.end()) continue;
      rpc::TaskSpec spec = it->second.spec;
      spec.set_interrupted(true);
      spec.set_incarnation(r.incarnation);
      spec.set_returns_held(true);
      (void)raylet_->Send(rpc::SUBMIT_TASK, spec);
      r.last_raylet_call = tid;
      handed.push_back(std::move(it->second));
      calls_.erase(it);
    }
    r.inflight.clear();
    if (!handed.empty()) {
      PHALANX_LOG(Info) << "connection to actor " << ToHex(actor).substr(0, 12) << " closed (" << why.message()
                        << "): " << handed.size() << " calls in flight handed to the raylet";
    }
  }
  std::vector<std::string> returns;
  for (const auto& c : handed) {
    for (int i = 1; i <= c.spec.num_returns(); ++i) {
      returns.push_back(MakeObjectId(c.spec.task_id(), static_cast<uint32_t>(i)));
    }
  }
  refs_->ForgetDirect(returns);
  for (const auto& c : handed) {
    for (const auto& id : c.arg_refs) objects_->RemoveLocalRef(id);
  }
  return true;
}

}  // namespace phalanx
