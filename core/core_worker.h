// CoreWorker: the library inside every driver and worker process. It talks
// to the node's raylet over one BlockingConnection, maps the node's object
// store once, and implements task submission, put/get/wait, functions, and
// the process's side of reference counting: it counts ObjectRefs per id and
// tells the raylet only when a count crosses zero, in batches that always go
// out before the next message that could depend on them.
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
#include <vector>

#include "core/blocking_connection.h"
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
};

class CoreWorker {
 public:
  // Returns a non-OK status (e.g. KeyboardInterrupt pending) to abandon a wait.
  using InterruptCheck = std::function<Status()>;

  static Result<std::unique_ptr<CoreWorker>> Connect(const CoreWorkerOptions& options);
  ~CoreWorker();

  std::string NextTaskId();
  std::string NextPutId();
  const std::string& client_id() const { return client_id_; }
  const std::string& node_id() const { return node_id_; }
  const std::string& session_dir() const { return session_dir_; }
  const std::string& gcs_address() const { return gcs_address_; }
  uint8_t* store_base() const { return store_base_; }
  uint64_t store_capacity() const { return store_capacity_; }
  uint64_t inline_threshold() const { return inline_threshold_; }
  void SetInterruptCheck(InterruptCheck check) { interrupt_ = std::move(check); }

  // Functions are registered once per process per id.
  Status RegisterFunction(const std::string& id, const std::string& name, const std::string& pickled);
  Result<rpc::GetFunctionReply> GetFunction(const std::string& id, int64_t timeout_ms);

  // Submits a task. The raylet counts this process as holding the return
  // ids: the caller wraps each in exactly one adopted ref (AdoptLocalRef).
  Status SubmitTask(const rpc::TaskSpec& spec);

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
  Result<std::vector<rpc::ObjectValue>> Get(const std::vector<std::string>& ids, int64_t timeout_ms);
  // Ids of `ids` that are ready once `num_returns` are, or at the deadline.
  Result<std::vector<std::string>> Wait(const std::vector<std::string>& ids, int num_returns, int64_t timeout_ms);
  void Release(const std::string& id);

  // Reference counting of this process's ObjectRefs.
  void AddLocalRef(const std::string& id);
  void AdoptLocalRef(const std::string& id);  // the raylet already counts this hold
  void RemoveLocalRef(const std::string& id);
  int64_t LocalRefCount(const std::string& id);
  // Sends pending reference changes and releases now.
  Status Flush();

  // Worker side: the next task pushed by the raylet, and its result.
  Result<rpc::PushTask> NextTask(int64_t timeout_ms);
  Status TaskDone(const rpc::TaskDone& done);

  Result<rpc::StatsReply> Stats(int64_t timeout_ms);
  // Named actors: NotFound when no live actor has the name.
  Result<rpc::GetActorReply> GetActor(const std::string& name, int64_t timeout_ms);
  Status KillActor(const std::string& actor_id, bool no_restart, int64_t timeout_ms);
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
  static Status ReplyStatus(const rpc::Status& s);

  std::unique_ptr<BlockingConnection> conn_;
  CoreWorkerOptions options_;
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
  bool stopping_ = false;                                // guarded by refs_mu_
  std::string out_buf_;                                  // encoded frames to write; guarded by refs_mu_
  std::thread flusher_;
};

}  // namespace phalanx
