// CoreWorker: the library inside every driver and worker process, and the
// face its users (the Python bindings, the C++ API) see. It connects to the
// node's raylet, maps the node's object store once, and implements task
// submission, put/get/wait, functions, cancels, placement groups, generators
// and collectives' requests. It is composed of parts, each in its own file:
//
//   RayletChannel  the connection to the raylet: batched one-way messages,
//                  requests with a deadline (worker/raylet_channel.h)
//   RefCounter     the process's refs, told to the raylet only when a count
//                  crosses zero, in batches that always go out before the
//                  next message that could depend on them; values a get can
//                  answer without a round trip (worker/ref_counter.h)
//   DirectCaller   actor method calls straight to the actor's worker
//                  (worker/direct_caller.h)
//   TaskServer     the worker side: the next task, its result, cancels,
//                  generators' items (worker/task_server.h)
//   DirectIo       the sockets between callers and actors (worker/direct_io.h)
//
// Actor method calls go straight to the actor's worker once it is placed,
// not through the raylet: the caller asks its raylet once where the actor
// lives (ACTOR_ROUTE), connects, and from then on writes calls to the worker
// and reads the results back itself. The raylet still keeps the books: it is
// told which results to expect (EXPECT_RETURNS, so a ref may leave this
// process at any time) and is handed each result as it arrives
// (DIRECT_RESULTS). When the connection breaks (the actor died), the calls in
// flight go to the raylet, which applies max_task_retries and restarts; the
// caller switches back to the direct path once the actor is alive again and
// the calls it made through the raylet have finished, so calls from one
// caller keep their order.
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
#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "worker/device_frees.h"
#include "worker/direct_caller.h"
#include "worker/blocked_notice.h"
#include "worker/direct_io.h"
#include "worker/group_channel.h"
#include "worker/raylet_channel.h"
#include "worker/ref_counter.h"
#include "worker/task_server.h"
#include "worker/worker_objects.h"

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

class CoreWorker : public WorkerObjects {
 public:
  // Returns a non-OK status (e.g. KeyboardInterrupt pending) to abandon a wait.
  using InterruptCheck = std::function<Status()>;

  static Result<std::unique_ptr<CoreWorker>> Connect(const CoreWorkerOptions& options);
  ~CoreWorker();

  // A new task id; `actor_call`: for an actor's method call (IsActorCallId says so later).
  std::string NextTaskId(bool actor_call = false);
  std::string NextPutId();
  const std::string& client_id() const { return me_.client_id; }
  const std::string& node_id() const { return me_.node_id; }
  const std::string& session_dir() const { return me_.session_dir; }
  const std::string& gcs_address() const { return gcs_address_; }
  uint8_t* store_base() const { return store_base_; }
  uint64_t store_capacity() const { return store_capacity_; }
  // The store's shared-memory descriptor (owned by this CoreWorker): another
  // mapping of it sees the same objects at the same offsets.
  int store_fd() const { return store_fd_; }
  uint64_t inline_threshold() const { return me_.inline_threshold; }
  void SetInterruptCheck(InterruptCheck check) { channel_.SetInterruptCheck(std::move(check)); }

  // Functions are registered once per process per id.
  Status RegisterFunction(const std::string& id, const std::string& name, const std::string& pickled);
  Result<rpc::GetFunctionReply> GetFunction(const std::string& id, int64_t timeout_ms);
  // Whole lines this worker's task or actor printed, for the driver of `job_id` (WORKER_OUTPUT, batched with
  // the other one-way messages: before the task's results). `text` over OutputRelay's 60 KiB goes in pieces.
  Status SendOutput(const std::string& job_id, const std::string& source, bool is_err, const std::string& text);
  // This process's metrics that changed (METRICS_REPORT, one-way), in as many messages as the frame's
  // limit needs (a series of more than 60 KiB is malformed: the caller keeps them small).
  Status SendMetrics(const rpc::MetricsReport& report);

  // Submits a task. The raylet counts this process as holding the return
  // ids: the caller wraps each in exactly one adopted ref (AdoptLocalRef).
  // Actor method calls go straight to the actor's worker when they can.
  Status SubmitTask(const rpc::TaskSpec& spec);
  // How many method calls went straight to an actor's worker (for tests and stats).
  uint64_t direct_calls_sent() const { return caller_.CallsSent(); }
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
                                            bool locate_only = false) override;
  // Ids of `ids` that are ready once `num_returns` are, or at the deadline.
  // `fetch_local`: ready means here, and objects on other nodes are copied
  // here; without it, ready on any node (nothing is copied).
  Result<std::vector<std::string>> Wait(const std::vector<std::string>& ids, int num_returns, int64_t timeout_ms,
                                        bool fetch_local = true) override;
  void Release(const std::string& id) override;

  // Reference counting of this process's ObjectRefs.
  void AddLocalRef(const std::string& id) override;
  void AdoptLocalRef(const std::string& id);  // the raylet already counts this hold
  void RemoveLocalRef(const std::string& id) override;
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
  // Named actors: NotFound when no live actor has the name.
  Result<rpc::GetActorReply> GetActor(const std::string& name, int64_t timeout_ms);
  Status KillActor(const std::string& actor_id, bool no_restart, int64_t timeout_ms);
  // The actor's checkpoint (ActorCheckpoint): with `save`, keeps `state` as
  // its last; without, returns the last kept (found=false: none).
  Result<rpc::ActorCheckpointReply> ActorCheckpoint(const std::string& actor_id, bool save, std::string state,
                                                    int64_t timeout_ms);
  // GPU objects (python/phalanx/_private/gpu_objects.py): this process keeps
  // `ids` on its GPU until the raylet frees them (sent before they are stored).
  Status DeviceHeld(const std::vector<std::string>& ids);
  // The ids of those the raylet freed since the last call, once there is
  // one, or none after `timeout_ms`.
  std::vector<std::string> FreedDeviceObjects(int64_t timeout_ms);
  // This process's connections as `rank` of `world` in static group `group`
  // (listening; GroupChannel::Connect then joins the others).
  Result<std::unique_ptr<GroupChannel>> OpenGroupChannel(const std::string& group, int rank, int world);
  // Closes the connection; later calls fail with Unavailable.
  void Shutdown();

 private:
  CoreWorker(std::unique_ptr<BlockingConnection> conn, const CoreWorkerOptions& options, WorkerIdentity me,
             const std::string& cluster_token, std::shared_ptr<const TlsContext> tls);
  // Pushes from the raylet that are handled as they are read (see BlockingConnection::SetPushFilter).
  bool FilterPush(const Frame& f, std::deque<Frame>* queued);
  // What a reference change asks of the channel.
  void Apply(RefCounter::Flush flush);
  // DirectIo's frames and closes, to the caller's side or the actor's.
  void OnDirectFrames(uint64_t conn, bool accepted, std::vector<Frame>& frames);
  void OnDirectClose(uint64_t conn, const Status& why);
  template <typename Reply>
  Result<Reply> CallFor(uint16_t type, const google::protobuf::MessageLite& m, int64_t timeout_ms, const char* what) {
    return channel_.CallFor<Reply>(type, m, timeout_ms, what);
  }

  const CoreWorkerOptions options_;
  const WorkerIdentity me_;
  const std::string cluster_token_;
  const std::shared_ptr<const TlsContext> tls_;
  std::string gcs_address_;
  uint8_t* store_base_ = nullptr;
  uint64_t store_capacity_ = 0;
  int store_fd_ = -1;
  std::atomic<uint64_t> task_counter_{1};
  std::atomic<uint64_t> put_counter_{1};
  std::mutex fn_mu_;
  std::unordered_map<std::string, bool> registered_functions_;  // guarded by fn_mu_
  DeviceFrees device_frees_;
  // The parts, in the order they are built (each is given those before it).
  RefCounter refs_;
  RayletChannel channel_;
  BlockedNotice blocked_notice_{&channel_};  // (workers only: a driver has no CPUs to lend)
  DirectIo io_;
  DirectCaller caller_;
  TaskServer server_;
};

}  // namespace phalanx
