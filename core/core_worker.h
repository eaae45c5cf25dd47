// CoreWorker: the library inside every driver and worker process. It talks
// to the node's raylet over one BlockingConnection, maps the node's object
// store once, and implements task submission, put/get/wait, functions, and
// the process's side of reference counting: it counts ObjectRefs per id and
// tells the raylet only when a count crosses zero, in batches that always go
// out before the next message that could depend on them.
//
// Actor method calls go straight to the actor's worker once it is placed
// (DirectIo), not through the raylet: the caller asks its raylet once where
// the actor lives (ACTOR_ROUTE), connects, and from then on writes calls to
// the worker and reads the results back itself. The raylet still keeps the
// books: it is told which results to expect (EXPECT_RETURNS, so a ref may
// leave this process at any time) and is handed each result as it arrives
// (DIRECT_RESULTS). When the connection breaks (the actor died), the calls
// in flight go to the raylet, which applies max_task_retries and restarts;
// the caller switches back to the direct path once the actor is alive again
// and the calls it made through the raylet have finished, so calls from one
// caller keep their order. On the actor's side a call whose ref arguments
// are not ready waits in HeldCalls (with its caller's later calls, unless the
// actor runs calls concurrently), not in NextTask.
// Thread-safe: any thread may call any method; calls that wait release no
// lock while waiting and honour a deadline and an interrupt check.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/blocking_connection.h"
#include "core/direct_io.h"
#include "core/held_calls.h"
#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx {

struct CoreWorkerOptions {
  std::string socket_path;
  bool is_worker = false;
  std::string worker_token;
  std::string language = "python";
  int64_t connect_timeout_ms = 10000;
  // How long past a request's own timeout to wait for the raylet before
  // declaring it unresponsive.
  int64_t grace_ms = 10000;
  // Actor method calls straight to the actor's worker (else through the raylet).
  // PHALANX_DIRECT_ACTOR_CALLS=0 turns it off, to compare.
  bool direct_actor_calls = true;
};

class CoreWorker {
 public:
  // Returns a non-OK status (e.g. KeyboardInterrupt pending) to abandon a wait.
  using InterruptCheck = std::function<Status()>;

  static Result<std::unique_ptr<CoreWorker>> Connect(const CoreWorkerOptions& options);
  ~CoreWorker();

  // A new task id; `actor_call`: for an actor's method call (IsActorCallId says so later).
  std::string NextTaskId(bool actor_call = false);
  std::string NextPutId();
  const std::string& client_id() const { return client_id_; }
  const std::string& node_id() const { return node_id_; }
  const std::string& session_dir() const { return session_dir_; }
  const std::string& gcs_address() const { return gcs_address_; }
  uint8_t* store_base() const { return store_base_; }
  uint64_t store_capacity() const { return store_capacity_; }
  // The store's shared-memory descriptor (owned by this CoreWorker): another
  // mapping of it sees the same objects at the same offsets.
  int store_fd() const { return store_fd_; }
  uint64_t inline_threshold() const { return inline_threshold_; }
  void SetInterruptCheck(InterruptCheck check) { interrupt_ = std::move(check); }

  // Functions are registered once per process per id.
  Status RegisterFunction(const std::string& id, const std::string& name, const std::string& pickled);
  Result<rpc::GetFunctionReply> GetFunction(const std::string& id, int64_t timeout_ms);

  // Submits a task. The raylet counts this process as holding the return
  // ids: the caller wraps each in exactly one adopted ref (AdoptLocalRef).
  // Actor method calls go straight to the actor's worker when they can.
  Status SubmitTask(const rpc::TaskSpec& spec);
  // How many method calls went straight to an actor's worker (for tests and stats).
  uint64_t direct_calls_sent() const { return direct_calls_sent_.load(); }
  // Calls to `actor_id` this process made and has no result of yet
  // (max_pending_calls): those sent straight to its worker, and those sent
  // through the raylet (counted from the first time this is asked for the
  // actor; when there are `limit` or more, the raylet is asked which are done).
  size_t ActorCallsInFlight(const std::string& actor_id, size_t limit);
  // Whether a call this process made to `actor_id` may still be running or waiting: one sent straight to
  // its worker without its result yet, or (while calls go through the raylet) the last one sent through
  // the raylet, which runs after the others, not finished there. Asks the raylet in the second case.
  bool ActorCallsPending(const std::string& actor_id);

  // A small value stored in raylet memory. With `hold`, the raylet counts this
  // process as holding it: the caller adopts one local ref (AdoptLocalRef).
  Status PutInline(const std::string& id, const std::string& data, const std::vector<std::string>& contained,
                   bool hold);
  // Reserves `size` bytes in the store; write at store_base() + offset, then Seal.
  // A full store is retried for up to a second (frees may be on the way);
  // then OutOfMemory carries the store's explanation.
  Result<uint64_t> CreateObject(const std::string& id, uint64_t size, const std::vector<std::string>& contained,
                                bool hold);
  Status Seal(const std::string& id);
  Status AbortCreate(const std::string& id);

  // Values of `ids` once all are ready or `timeout_ms` passes (< 0: none).
  // Small values this process holds are answered from its own cache.
  // Objects still pending at the deadline come back with state OBJ_PENDING.
  // Each IN_STORE value is pinned: call Release(id) once per such value.
  // `locate_only`: objects held on another node for this one are not copied
  // here; they come back PENDING (see rpc::GetObjects).
  Result<std::vector<rpc::ObjectValue>> Get(const std::vector<std::string>& ids, int64_t timeout_ms,
                                            bool locate_only = false);
  // Ids of `ids` that are ready once `num_returns` are, or at the deadline.
  // `fetch_local`: ready means here, and objects on other nodes are copied
  // here; without it, ready on any node (nothing is copied).
  Result<std::vector<std::string>> Wait(const std::vector<std::string>& ids, int num_returns, int64_t timeout_ms,
                                        bool fetch_local = true);
  void Release(const std::string& id);

  // Reference counting of this process's ObjectRefs.
  void AddLocalRef(const std::string& id);
  void AdoptLocalRef(const std::string& id);  // the raylet already counts this hold
  void RemoveLocalRef(const std::string& id);
  int64_t LocalRefCount(const std::string& id);
  // Sends pending reference changes and releases now.
  Status Flush();

  // Worker side: the next task pushed by the raylet or sent straight to this
  // actor by a caller, and its result (which goes back the way it came).
  Result<rpc::PushTask> NextTask(int64_t timeout_ms);
  Status TaskDone(rpc::TaskDone done);
  // While a task runs: return values up to this size travel inline (callers
  // on other nodes get everything inline), and whether store objects made for
  // its returns are held by this process until the caller's raylet takes them.
  // (Several tasks may run at once: an actor with max_concurrency > 1.)
  uint64_t ReturnInlineLimit();
  bool ReturnsHeld(const std::string& task_id);

  // Generators (scheduler/stream_table.h). Worker side: hands in one item of
  // a running generator task (item.returns), or its last word (stream_end),
  // the way its results go (to the raylet, or straight to the caller).
  Status StreamItem(rpc::TaskDone item);
  // Waits until the caller of generator `task_id` has read `need` items, or
  // `timeout_ms`; dropped: the caller let go (stop producing).
  Result<rpc::StreamCreditReply> StreamCredit(const std::string& task_id, uint64_t need, int64_t timeout_ms);
  // phalanx.cancel, caller side: a direct actor call goes to the actor's
  // worker, anything else to the raylet (see rpc::CancelTask).
  Status Cancel(const std::string& task_id, bool force, bool recursive);
  // Placement groups: created by this node's raylet (which coordinates it);
  // its ready object (pg_id, 1) is held by this process from now on.
  Status CreatePlacementGroup(const rpc::PlacementGroupInfo& info);
  // PG_REMOVE or PG_GET; the reply's status says whether it worked.
  Result<rpc::PlacementGroupReply> PlacementGroupCall(uint16_t type, const rpc::PlacementGroupRequest& m,
                                                      int64_t timeout_ms);
  // Worker side: whether `task_id` (taken or about to be) was cancelled.
  // `read`: first read what the raylet has sent, without waiting.
  bool CancelRequested(const std::string& task_id, bool read);
  // The same, asked by the handler of the raylet's SIGUSR2: first waits (up to
  // 1 s) for the CANCEL_TASK the raylet sent before the signal.
  bool CancelSignalled(const std::string& task_id);

  // Caller side: this process has read `consumed` items of its generator
  // call `task_id`; waits for more (or the end) up to `timeout_ms`.
  Result<rpc::StreamNextReply> StreamNext(const std::string& task_id, uint64_t consumed, int64_t timeout_ms);
  // This process lets go of its generator call (unread items are freed).
  Status StreamDrop(const std::string& task_id);

  // The timeline's records (core/trace.h) of this node's processes, and of
  // every live node's with `all_nodes`, written at or after `since_ns`.
  Result<rpc::TraceReply> CollectTrace(uint64_t since_ns, bool all_nodes, int64_t timeout_ms);
  // `phalanx memory`: the objects of this node (and every live one's with
  // `all_nodes`), largest first, at most `max_objects` each, with their holders.
  Result<rpc::MemoryReply> MemorySummary(uint32_t max_objects, bool all_nodes, int64_t timeout_ms);
  Result<rpc::StatsReply> Stats(int64_t timeout_ms);

  // Collectives (phalanx.collective): the raylet combines m.input_ids into
  // m.out_id, held by this client from now on (adopt a ref to it).
  Status Reduce(const rpc::ReduceObjects& m);
  // The inputs that went into a reduce's result, once it is done.
  Result<std::vector<std::string>> ReducedInputs(const std::string& out_id, int64_t timeout_ms);
  // Static collective groups: meets the group's other ranks at m.key (see
  // scheduler/rendezvous.h) and returns every rank's payload, by rank.
  Result<std::vector<std::string>> Rendezvous(const rpc::Rendezvous& m);
  // Tells the raylet where objects it has no record of are (another rank's
  // array): held by this client from now on, copied here when read here.
  Status Locate(const rpc::LocateObjects& m);
  // Named actors: NotFound when no live actor has the name.
  Result<rpc::GetActorReply> GetActor(const std::string& name, int64_t timeout_ms);
  Status KillActor(const std::string& actor_id, bool no_restart, int64_t timeout_ms);
  // The actor's checkpoint (ActorCheckpoint): with `save`, keeps `state` as
  // its last; without, returns the last kept (found=false: none).
  Result<rpc::ActorCheckpointReply> ActorCheckpoint(const std::string& actor_id, bool save, std::string state,
                                                    int64_t timeout_ms);
  // Closes the connection; later calls fail with Unavailable.
  void Shutdown();

 private:
  explicit CoreWorker(std::unique_ptr<BlockingConnection> conn);
  // One-way messages are batched: Send queues (written within ~200 us, at
  // 64 KiB, or before the next request); SendNow writes the queue at once.
  Status Send(uint16_t type, const google::protobuf::MessageLite& m);
  Status SendNow(uint16_t type, const google::protobuf::MessageLite& m);
  Status WriteOutLocked();
  Result<Frame> Call(uint16_t type, const google::protobuf::MessageLite& m, int64_t timeout_ms);
  Status FlushLocked();
  void FlushLoop();
  // Releases every mapping with no view (REQUIRES refs_mu_).
  void UnmapIdleLocked();
  // Call, with the reply parsed as `Reply` ("malformed <what> reply" if it is not one).
  template <typename Reply>
  Result<Reply> CallFor(uint16_t type, const google::protobuf::MessageLite& m, int64_t timeout_ms, const char* what) {
    PHALANX_ASSIGN_OR_RETURN(Frame f, Call(type, m, timeout_ms));
    Reply r;
    if (!r.ParseFromString(f.body)) return Status::Internal(std::string("malformed ") + what + " reply");
    return r;
  }

  // ---- direct actor calls ----
  struct ActorRoute {
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
    // raylet that may not be done yet (kept once ActorCallsInFlight is asked).
    bool count_raylet_calls = false;
    std::vector<std::string> raylet_calls;
  };
  struct DirectCall {
    rpc::TaskSpec spec;
    std::vector<std::string> arg_refs;  // ref arguments kept alive until the result comes
  };
  struct RunningDirect {
    uint64_t conn = 0;
    std::vector<std::string> fetched;  // ref arguments copied from the caller's node, held till done
    std::vector<std::string> borrowed;  // refs nested in the arguments, from the caller's node (local refs till done)
  };
  void NoteCancel(const std::string& task_id, bool from_raylet);
  // For in-store returns: their sizes (recorded at create) go with them.
  void FillReturnSizesLocked(rpc::TaskDone* done);
  Status SubmitActorCall(rpc::TaskSpec spec);
  // Under routes_mu_: asks the raylet whether calls may go direct, and connects.
  void MaybeGoDirect(const std::string& actor_id, ActorRoute& r);
  Status SendActorCallLocked(ActorRoute& r, rpc::TaskSpec spec);
  // For an actor on another node (`actor_node`): small ref arguments become
  // inline values, and refs nested in the arguments are lent to that node.
  Status InlineRefArgs(rpc::TaskSpec* spec, const std::string& actor_node);
  DirectIo* Io();
  void FlushDirect();  // writes queued direct calls now
  void OnDirectFrames(uint64_t conn, std::vector<Frame>& frames);
  void OnDirectClose(uint64_t conn, const Status& why);
  void OnDirectDone(std::vector<rpc::TaskDone>& done);
  Status StartDirectServer(rpc::TaskDone* done);
  Status ReleaseHeldReturns(const rpc::TaskDone& done);
  // Actor side: a direct call about to run (its arguments read); its result goes back to its caller.
  rpc::PushTask StartDirectCall(HeldCalls::Call call);
  // Lets go of what a direct call that will not run holds (its caller went away).
  void ReleaseDirectArgs(const std::vector<std::string>& fetched, const std::vector<std::string>& borrowed);
  class HeldArgs;  // HeldCalls::Objects over this CoreWorker

  std::unique_ptr<BlockingConnection> conn_;
  CoreWorkerOptions options_;
  std::string node_address_;
  std::string cluster_token_;
  std::shared_ptr<const TlsContext> tls_;  // the cluster runs with --tls
  std::string client_id_;
  std::string node_id_;
  std::string session_dir_;
  std::string gcs_address_;
  uint8_t* store_base_ = nullptr;
  uint64_t store_capacity_ = 0;
  uint64_t inline_threshold_ = 100 * 1024;
  int store_fd_ = -1;
  std::atomic<uint64_t> task_counter_{1};
  std::atomic<uint64_t> put_counter_{1};
  InterruptCheck interrupt_;

  std::mutex fn_mu_;
  std::unordered_map<std::string, bool> registered_functions_;  // guarded by fn_mu_

  std::mutex refs_mu_;
  std::condition_variable refs_cv_;
  std::unordered_map<std::string, int64_t> local_refs_;  // guarded by refs_mu_
  std::unordered_map<std::string, bool> dirty_;          // id -> held at last flush; guarded by refs_mu_
  std::vector<std::string> releases_;                    // guarded by refs_mu_
  // Small values this process put or got, kept while it holds a ref to them:
  // a get of those needs no round trip to the raylet. guarded by refs_mu_.
  std::unordered_map<std::string, std::string> local_values_;
  // Store objects this process holds a ref to and has mapped: one raylet pin
  // each, shared by all of this process's views. guarded by refs_mu_.
  struct MappedObject {
    uint64_t offset = 0;
    uint64_t size = 0;
    int64_t views = 0;
  };
  std::unordered_map<std::string, MappedObject> mapped_;
  // The raylet asked for the pins of mappings nothing reads now (UNMAP_IDLE):
  // set by the reading thread, handled by the flush thread.
  std::atomic<bool> unmap_idle_{false};
  // Return ids of direct calls whose results have not come yet; guarded by refs_mu_.
  std::unordered_set<std::string> direct_pending_;
  std::condition_variable direct_cv_;                    // with refs_mu_: a direct result came
  bool stopping_ = false;                                // guarded by refs_mu_
  std::string out_buf_;                                  // encoded frames to write; guarded by refs_mu_
  std::thread flusher_;

  std::mutex io_mu_;
  std::unique_ptr<DirectIo> io_;  // started on first use; guarded by io_mu_ until then
  // Lock order: routes_mu_ before refs_mu_.
  std::mutex routes_mu_;
  std::unordered_map<std::string, ActorRoute> routes_;        // actor id -> route; guarded by routes_mu_
  std::unordered_map<uint64_t, std::string> conn_actor_;      // caller's connections; guarded by routes_mu_
  std::unordered_map<std::string, DirectCall> direct_calls_;  // task id -> call; guarded by routes_mu_
  std::atomic<uint64_t> direct_calls_sent_{0};
  // Worker side (an actor's process).
  std::mutex server_mu_;
  std::unordered_map<uint64_t, std::string> callers_;         // connections that said hello -> the caller's node; guarded by server_mu_
  std::unordered_map<std::string, std::string> stream_owners_;  // running generators -> the caller's node; guarded by server_mu_
  std::unordered_set<std::string> cancelled_;                 // tasks cancelled before they were done; guarded by server_mu_
  uint64_t raylet_cancels_ = 0;                               // CANCEL_TASKs from the raylet; guarded by server_mu_
  uint64_t cancel_signals_ = 0;                               // the raylet's SIGUSR2s handled; guarded by server_mu_
  std::unordered_map<std::string, RunningDirect> running_direct_;  // guarded by server_mu_
  std::unordered_set<std::string> creations_;                 // creation tasks pushed; guarded by server_mu_
  std::unordered_set<std::string> running_tasks_;             // tasks taken and not done; guarded by server_mu_
  std::unordered_map<std::string, uint64_t> return_sizes_;    // store returns of running tasks; guarded by server_mu_
  bool serving_ = false;                                      // guarded by server_mu_
  // Direct calls whose arguments are not ready, or that wait behind their caller's first such call.
  std::unique_ptr<HeldArgs> held_args_;
  std::unique_ptr<HeldCalls> held_;
};

}  // namespace phalanx
