// DirectCaller: the caller's side of direct actor calls (see "Actor method
// calls go straight to the actor's worker" in worker/core_worker.h). It keeps
// a route per actor: whether calls go through the raylet or over a
// connection to the actor's worker, the calls in flight on it, and the last
// call sent through the raylet (the switch to the direct path waits until
// that one is done, so one caller's calls keep their order). Results come
// back on the connection; a connection that breaks hands its calls in
// flight to the raylet, which retries or fails them.
// Thread-safe. Lock order: its lock before its send lock and the RefCounter's.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "worker/direct_io.h"
#include "worker/raylet_channel.h"
#include "worker/ref_counter.h"
#include "worker/worker_objects.h"

namespace phalanx {

class DirectCaller {
 public:
  // `enabled`: false sends every call through the raylet (PHALANX_DIRECT_ACTOR_CALLS=0).
  DirectCaller(const WorkerIdentity& me, bool enabled, RayletChannel* raylet, RefCounter* refs,
               WorkerObjects* objects, DirectIo* io);

  // An actor method call: straight to the actor's worker when it can go.
  Status Submit(rpc::TaskSpec spec);
  size_t CallsSent() const { return calls_sent_.load(); }
  // As CoreWorker::ActorCallsInFlight and CoreWorker::ActorCallsPending.
  size_t CallsInFlight(const std::string& actor_id, size_t limit);
  bool CallsPending(const std::string& actor_id);
  // A cancel of a call in flight on a connection goes on that connection;
  // nothing (to be sent to the raylet) for any other.
  std::optional<Status> CancelDirect(const rpc::CancelTask& m);

  // From the DirectIo: results (DIRECT_DONE frames) on connection `conn`;
  // a connection closed (false: it is not one of this caller's).
  void OnResults(uint64_t conn, const std::vector<Frame>& frames);
  bool OnClose(uint64_t conn, const Status& why);

 private:
  // Asks the raylet where `actor_id`'s calls may go, and whether call
  // `last_call` (when given) is done; not OK if no well-formed answer came
  // (the answer's own status says whether the raylet knew the actor).
  Result<rpc::ActorRouteReply> AskRoute(const std::string& actor_id, const std::string& last_call);

  struct Route {
    uint64_t conn = 0;          // the connection to the actor's worker; 0: calls go through the raylet
    bool remote = false;        // the actor's worker is on another node
    std::string node_id;        // the actor's node
    int32_t incarnation = 0;    // the actor's restarts when we connected
    // The last call sent through the raylet, not known to be finished. The
    // actor runs one caller's calls in order, so when it is done, so are the
    // ones before it.
    std::string last_raylet_call;
    Clock::time_point next_lookup{};
    std::chrono::milliseconds backoff{1};
    std::deque<std::string> inflight;       // task ids sent straight to the worker, oldest first
    // max_pending_calls: the first return of each call sent through the
    // raylet that may not be done yet (kept once CallsInFlight is asked).
    bool count_raylet_calls = false;
    std::vector<std::string> raylet_calls;
  };
  struct Call {
    rpc::TaskSpec spec;
    std::vector<std::string> arg_refs;  // ref arguments kept alive until the result comes
  };
  // Under mu_: asks the raylet whether calls may go direct, and connects.
  void MaybeGoDirect(const std::string& actor_id, Route& r);
  // Sends `spec` on its route; `l` holds mu_, and may be let go before the
  // write (the result can come before the write returns, and the thread
  // that reads it takes mu_).
  Status Send(Route& r, rpc::TaskSpec spec, std::unique_lock<std::mutex>& l);
  // For an actor on another node (`actor_node`): small ref arguments become
  // inline values, and refs nested in the arguments are lent to that node.
  Status InlineRefArgs(rpc::TaskSpec* spec, const std::string& actor_node);

  const WorkerIdentity& me_;
  const bool enabled_;
  RayletChannel* raylet_;
  RefCounter* refs_;
  WorkerObjects* objects_;
  DirectIo* io_;
  std::mutex mu_;
  // Taken under mu_ by whoever writes a call or a cancel, and held through
  // the write: frames go out in the order mu_ saw them. Lock order: mu_ first.
  std::mutex send_mu_;
  std::unordered_map<std::string, Route> routes_;       // actor id -> route; guarded by mu_
  std::unordered_map<uint64_t, std::string> conn_actor_;  // connection -> actor; guarded by mu_
  std::unordered_map<std::string, Call> calls_;         // task id -> call in flight; guarded by mu_
  std::atomic<uint64_t> calls_sent_{0};
};

}  // namespace phalanx
