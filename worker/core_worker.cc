#include "worker/core_worker.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_set>

#include "core/ids.h"
#include "core/logging.h"
#include "core/trace.h"
#include "core/value_format.h"
#include "core/status_proto.h"

namespace phalanx {

namespace {
constexpr auto kFullStoreRetry = std::chrono::seconds(1);     // creates retry this long on a full store
// Whether one of the values a get has is its task's error (or lost).
bool AnyFailed(const std::vector<rpc::ObjectValue>& values) {
  for (const auto& v : values) {
    if (v.state() == rpc::OBJ_LOST || (v.state() == rpc::OBJ_INLINE && value_format::IsError(v.data()))) return true;
  }
  return false;
}
}  // namespace

Result<std::unique_ptr<CoreWorker>> CoreWorker::Connect(const CoreWorkerOptions& given) {
  CoreWorkerOptions options = given;
  if (const char* v = std::getenv("PHALANX_DIRECT_ACTOR_CALLS")) options.direct_actor_calls = std::string(v) != "0";
  PHALANX_ASSIGN_OR_RETURN(auto conn, BlockingConnection::ConnectUnix(options.socket_path, options.connect_timeout_ms));
  WorkerIdentity me;
  me.client_id = RandomBytes(kClientIdSize);
  rpc::RegisterClient reg;
  reg.set_client_id(me.client_id);
  reg.set_is_worker(options.is_worker);
  reg.set_pid(static_cast<int>(::getpid()));
  reg.set_language(options.language);
  reg.set_worker_token(options.worker_token);
  int fd = -1;
  auto frame = conn->CallReceivingFd(rpc::REGISTER_CLIENT, reg, &fd, DeadlineAfterMs(options.connect_timeout_ms));
  if (!frame.ok()) return frame.status();
  rpc::RegisterClientReply r;
  if (!r.ParseFromString(frame.value().body)) return Status::Internal("malformed registration reply");
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  if (fd < 0) return Status::Internal("the raylet sent no object store descriptor");
  std::shared_ptr<const TlsContext> tls;
  if (r.tls()) {
    auto made = TlsContext::Create(r.cluster_token());
    if (!made.ok()) {
      ::close(fd);
      return made.status();
    }
    tls = made.value();
  }
  void* base = ::mmap(nullptr, r.store_capacity(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    ::close(fd);
    return Status::Unavailable(std::string("cannot map the object store: ") + std::strerror(errno));
  }
  me.node_id = r.node_id();
  me.session_dir = r.session_dir();
  me.node_address = r.node_address();
  if (r.inline_threshold() > 0) me.inline_threshold = r.inline_threshold();
  std::unique_ptr<CoreWorker> cw(new CoreWorker(std::move(conn), options, std::move(me), r.cluster_token(), tls));
  cw->store_fd_ = fd;
  cw->store_base_ = static_cast<uint8_t*>(base);
  cw->store_capacity_ = r.store_capacity();
  cw->gcs_address_ = r.gcs_address();
  // The timeline's events of this worker: the tasks and actor calls it runs.
  if (options.is_worker) trace::OpenProcessRing(cw->me_.session_dir, cw->me_.node_id, "worker");
  CoreWorker* self = cw.get();
  cw->channel_.connection().SetPushFilter(
      [self](const Frame& f, std::deque<Frame>* queued) { return self->FilterPush(f, queued); });
  return cw;
}

CoreWorker::CoreWorker(std::unique_ptr<BlockingConnection> conn, const CoreWorkerOptions& options, WorkerIdentity me,
                       const std::string& cluster_token, std::shared_ptr<const TlsContext> tls)
    : options_(options),
      me_(std::move(me)),
      cluster_token_(cluster_token),
      tls_(tls),
      channel_(std::move(conn), &refs_, options.grace_ms),
      io_(cluster_token, std::move(tls), [this](uint64_t c, bool accepted, std::vector<Frame>& f) { OnDirectFrames(c, accepted, f); },
          [this](uint64_t c, const Status& why) { OnDirectClose(c, why); }, &channel_.connection()),
      caller_(me_, options.direct_actor_calls, &channel_, &refs_, this, &io_),
      server_(me_, &channel_, this, &io_) {}

CoreWorker::~CoreWorker() {
  Shutdown();
  if (store_base_ != nullptr) ::munmap(store_base_, store_capacity_);
  if (store_fd_ >= 0) ::close(store_fd_);
}

void CoreWorker::Shutdown() {
  device_frees_.Stop();
  io_.Stop();  // no more callbacks into this object
  channel_.Stop();
  refs_.Stop();
  server_.Stop();  // (its waits end: the connection is closed)
}

// Warnings from the raylet are printed as they arrive. A worker that blocks
// in a get gives back the tasks queued behind the running one, so they can
// run elsewhere (they might be what it waits for).
bool CoreWorker::FilterPush(const Frame& f, std::deque<Frame>* queued) {
  if (f.header.type == rpc::CANCEL_TASK) {  // noted now; NextTask passes the notice on too
    rpc::CancelTask m;
    if (m.ParseFromString(f.body)) server_.NoteCancel(m.task_id(), true);
    return false;
  }
  if (f.header.type == rpc::UNMAP_IDLE) {  // the writer thread lets go of idle mappings
    refs_.UnmapIdleSoon();
    channel_.Nudge();
    return true;
  }
  if (f.header.type == rpc::DEVICE_OBJECTS_FREED) {  // for the GPU objects' holder thread
    rpc::ObjectIds m;
    if (m.ParseFromString(f.body)) device_frees_.Add(m);
    return true;
  }
  if (f.header.type == rpc::CLIENT_WARNING) {
    rpc::Status why;
    // (code 0: a note, such as a long copy's progress)
    if (why.ParseFromString(f.body)) {
      std::fprintf(stderr, why.code() == 0 ? "phalanx: %s\n" : "phalanx: warning: %s\n", why.message().c_str());
    }
    return true;
  }
  if (f.header.type != rpc::RECALL_TASKS) return false;
  rpc::TaskIds want, gave;
  if (!want.ParseFromString(f.body)) return true;
  std::unordered_set<std::string> ids(want.task_ids().begin(), want.task_ids().end());
  for (auto it = queued->begin(); it != queued->end();) {
    rpc::PushTask t;
    if (it->header.type == rpc::PUSH_TASK && t.ParseFromString(it->body) && ids.count(t.spec().task_id())) {
      gave.add_task_ids(t.spec().task_id());
      it = queued->erase(it);
    } else {
      ++it;
    }
  }
  (void)channel_.connection().Send(rpc::TASKS_RECALLED, 0, gave);
  return true;
}

std::string CoreWorker::NextTaskId(bool actor_call) {
  return MakeTaskId(me_.client_id, (task_counter_.fetch_add(1) << 2) | (actor_call ? kActorCallIdBit : 0));
}
std::string CoreWorker::NextPutId() {
  return MakeObjectId(MakeTaskId(me_.client_id, (put_counter_.fetch_add(1) << 1) | 1), 0);
}

Status CoreWorker::RegisterFunction(const std::string& id, const std::string& name, const std::string& pickled) {
  {
    std::lock_guard<std::mutex> l(fn_mu_);
    if (registered_functions_.count(id)) return Status::OK();
    registered_functions_[id] = true;
  }
  rpc::RegisterFunction m;
  m.set_function_id(id);
  m.set_name(name);
  m.set_pickled(pickled);
  return channel_.Send(rpc::REGISTER_FUNCTION, m);
}

Status CoreWorker::SendOutput(const std::string& job_id, const std::string& source, bool is_err,
                              const std::string& text) {
  constexpr size_t kPiece = 60 * 1024;  // (scheduler/output_relay.h's kMaxText)
  rpc::WorkerOutput m;
  m.set_job_id(job_id);
  m.set_source(source.substr(0, 256));
  m.set_is_err(is_err);
  for (size_t at = 0; at < text.size(); at += kPiece) {
    m.set_text(text.substr(at, kPiece));
    PHALANX_RETURN_IF_ERROR(channel_.Send(rpc::WORKER_OUTPUT, m));
  }
  return Status::OK();
}

Status CoreWorker::SendMetrics(const rpc::MetricsReport& report) {
  constexpr size_t kPiece = 60 * 1024;  // (core/frame.h's kSmallBody is 64 KiB)
  rpc::MetricsReport piece;
  size_t bytes = 0;
  for (const auto& s : report.series()) {
    size_t n = s.ByteSizeLong() + 8;
    if (bytes + n > kPiece && piece.series_size() > 0) {
      PHALANX_RETURN_IF_ERROR(channel_.Send(rpc::METRICS_REPORT, piece));
      piece.Clear();
      bytes = 0;
    }
    *piece.add_series() = s;
    bytes += n;
  }
  if (piece.series_size() > 0) PHALANX_RETURN_IF_ERROR(channel_.Send(rpc::METRICS_REPORT, piece));
  return Status::OK();
}

Result<rpc::GetFunctionReply> CoreWorker::GetFunction(const std::string& id, int64_t timeout_ms) {
  rpc::GetFunction m;
  m.set_function_id(id);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::GetFunctionReply>(rpc::GET_FUNCTION, m, timeout_ms, "function"));
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  return r;
}

Status CoreWorker::SubmitTask(const rpc::TaskSpec& spec) {
  if (spec.kind() == rpc::TASK_ACTOR_METHOD) return caller_.Submit(spec);
  return channel_.Send(rpc::SUBMIT_TASK, spec);
}

size_t CoreWorker::ActorCallsInFlight(const std::string& actor_id, size_t limit) {
  return caller_.CallsInFlight(actor_id, limit);
}
bool CoreWorker::ActorCallsPending(const std::string& actor_id) { return caller_.CallsPending(actor_id); }

Status CoreWorker::PutInline(const std::string& id, const std::string& data, const std::vector<std::string>& contained,
                             bool hold) {
  rpc::PutInline m;
  m.set_object_id(id);
  m.set_data(data);
  m.set_hold(hold);
  for (const auto& c : contained) m.add_contained_ids(c);
  if (hold) refs_.CacheValue(id, data);  // dropped when the adopted ref goes
  return channel_.Send(rpc::PUT_INLINE, m);
}

Result<uint64_t> CoreWorker::CreateObject(const std::string& id, uint64_t size,
                                          const std::vector<std::string>& contained, bool hold) {
  rpc::CreateObject m;
  m.set_object_id(id);
  m.set_size(size);
  m.set_hold(hold);
  for (const auto& c : contained) m.add_contained_ids(c);
  // A full store often has frees on the way (refs this or another process
  // just dropped): retry for a moment before giving up.
  auto give_up = Clock::now() + kFullStoreRetry;
  auto backoff = std::chrono::milliseconds(2);
  while (true) {
    PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::CreateObjectReply>(rpc::CREATE_OBJECT, m, 60000, "create"));
    Status st = FromProto(r.status());
    if (st.ok()) {
      server_.NoteCreated(id, size);
      return r.offset();
    }
    if (st.code() != StatusCode::kOutOfMemory || size > store_capacity_ || Clock::now() >= give_up) return st;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

Status CoreWorker::Seal(const std::string& id) {
  rpc::SealObject m;
  m.set_object_id(id);
  return channel_.Send(rpc::SEAL_OBJECT, m);
}

Status CoreWorker::AbortCreate(const std::string& id) {
  rpc::SealObject m;
  m.set_object_id(id);
  return channel_.Send(rpc::ABORT_CREATE, m);
}

Result<std::vector<rpc::ObjectValue>> CoreWorker::Get(const std::vector<std::string>& ids, int64_t timeout_ms,
                                                      bool locate_only) {
  Deadline deadline = DeadlineAfterMs(timeout_ms);
  io_.Flush();
  // A get of several (reading values) ends at the first that failed, as
  // Ray's: the rest come back pending, and the caller raises that failure.
  const bool until_failure = !locate_only && ids.size() > 1;
  // Results of direct actor calls come to this process: wait for them here.
  PHALANX_RETURN_IF_ERROR(refs_.AwaitDirect(ids, deadline, channel_.interrupt(), until_failure,
                                            options_.is_worker ? &blocked_notice_ : nullptr));
  if (timeout_ms >= 0) {
    timeout_ms = MsLeft(deadline);
  }
  std::vector<rpc::ObjectValue> out(ids.size());
  rpc::GetObjects m;
  std::vector<size_t> asked;  // positions in `out` the raylet answers
  refs_.AnswerLocally(ids, &out, &m, &asked);
  if (asked.empty()) return out;
  if (until_failure && AnyFailed(out)) timeout_ms = 0;  // (the raylet says what it has now)
  m.set_timeout_ms(timeout_ms);
  m.set_locate_only(locate_only);
  PHALANX_ASSIGN_OR_RETURN(Frame f, channel_.Call(rpc::GET_OBJECTS, m, timeout_ms));
  rpc::GetObjectsReply r;
  if (!r.ParseFromString(f.body) || static_cast<size_t>(r.objects_size()) != asked.size()) {
    return Status::Internal("malformed get reply");
  }
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  refs_.TakeAnswers(&r, asked, &out);
  return out;
}

Result<std::vector<std::string>> CoreWorker::Wait(const std::vector<std::string>& ids, int num_returns,
                                                  int64_t timeout_ms, bool fetch_local) {
  io_.Flush();
  std::vector<std::string> ready = refs_.ReadyHere(ids);
  if (static_cast<int>(ready.size()) >= num_returns) return ready;
  rpc::WaitObjects m;
  for (const auto& id : ids) m.add_object_ids(id);
  m.set_num_returns(num_returns);
  m.set_timeout_ms(timeout_ms);
  m.set_no_fetch(!fetch_local);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::WaitObjectsReply>(rpc::WAIT_OBJECTS, m, timeout_ms, "wait"));
  return std::vector<std::string>(r.ready_ids().begin(), r.ready_ids().end());
}

void CoreWorker::Apply(RefCounter::Flush flush) {
  if (flush == RefCounter::Flush::kSoon) channel_.Nudge();
  if (flush == RefCounter::Flush::kNow) (void)channel_.Flush();
}

void CoreWorker::Release(const std::string& id) { Apply(refs_.Release(id)); }
void CoreWorker::AddLocalRef(const std::string& id) { Apply(refs_.Add(id)); }
void CoreWorker::AdoptLocalRef(const std::string& id) { refs_.Adopt(id); }
void CoreWorker::RemoveLocalRef(const std::string& id) { Apply(refs_.Remove(id)); }
int64_t CoreWorker::LocalRefCount(const std::string& id) { return refs_.Count(id); }
Status CoreWorker::Flush() { return channel_.Flush(); }

Result<std::unique_ptr<GroupChannel>> CoreWorker::OpenGroupChannel(const std::string& group, int rank, int world) {
  GroupChannel::Options o;
  o.token = cluster_token_;
  o.tls = tls_;
  o.node_id = me_.node_id;
  o.node_address = me_.node_address;
  o.session_dir = me_.session_dir;
  o.group = group;
  o.rank = rank;
  o.world = world;
  o.interrupted = channel_.interrupt();
  return GroupChannel::Open(std::move(o));
}

Status CoreWorker::DeviceHeld(const std::vector<std::string>& ids) {
  rpc::ObjectIds m;
  for (const auto& id : ids) m.add_object_ids(id);
  return channel_.Send(rpc::DEVICE_HELD, m);
}

std::vector<std::string> CoreWorker::FreedDeviceObjects(int64_t timeout_ms) {
  return device_frees_.Take(DeadlineAfterMs(timeout_ms),
                            [this](Deadline until) { channel_.connection().Pump(until); });
}

Result<rpc::PushTask> CoreWorker::NextTask(int64_t timeout_ms) { return server_.NextTask(timeout_ms); }
Status CoreWorker::TaskDone(rpc::TaskDone done) { return server_.TaskDone(std::move(done)); }
uint64_t CoreWorker::ReturnInlineLimit() { return me_.inline_threshold; }
bool CoreWorker::ReturnsHeld(const std::string& task_id) { return server_.ReturnsHeld(task_id); }
Status CoreWorker::StreamItem(rpc::TaskDone item) { return server_.StreamItem(std::move(item)); }
Result<rpc::StreamCreditReply> CoreWorker::StreamCredit(const std::string& task_id, uint64_t need,
                                                       int64_t timeout_ms) {
  return server_.StreamCredit(task_id, need, timeout_ms);
}
bool CoreWorker::CancelRequested(const std::string& task_id, bool read) {
  return server_.CancelRequested(task_id, read);
}
bool CoreWorker::CancelSignalled(const std::string& task_id) { return server_.CancelSignalled(task_id); }

void CoreWorker::OnDirectFrames(uint64_t conn, bool accepted, std::vector<Frame>& frames) {
  // A caller's connection brings results; an actor's brings its callers'
  // hellos, calls and cancels (anything else on it closes it). Told apart by
  // the connection, not by what its peer sends: frames of an actor's
  // connection may be read by a thread that holds the caller's lock.
  if (!frames.empty() && frames.front().header.type == rpc::DIRECT_DONE && !accepted) {
    return caller_.OnResults(conn, frames);
  }
  server_.OnCallerFrames(conn, frames);
}

void CoreWorker::OnDirectClose(uint64_t conn, const Status& why) {
  if (!server_.OnClose(conn)) caller_.OnClose(conn, why);
}

Status CoreWorker::CreatePlacementGroup(const rpc::PlacementGroupInfo& info) {
  rpc::CreatePlacementGroup m;
  *m.mutable_info() = info;
  return channel_.SendNow(rpc::PG_CREATE, m);
}

Result<rpc::PlacementGroupReply> CoreWorker::PlacementGroupCall(uint16_t type, const rpc::PlacementGroupRequest& m,
                                                                int64_t timeout_ms) {
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::PlacementGroupReply>(type, m, timeout_ms, "placement group"));
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  return r;
}

Status CoreWorker::Cancel(const std::string& task_id, bool force, bool recursive) {
  // Ray refuses force=True for an actor's call (its id says it is one) that is not over yet.
  if (force && IsActorCallId(task_id)) {
    auto done = Wait({MakeObjectId(task_id, 1)}, 1, 0, /*fetch_local=*/false);
    if (done.ok() && !done.value().empty()) return Status::OK();  // (finished: nothing to cancel)
    return Status::InvalidArgument(kNoForceOnActorCalls);
  }
  rpc::CancelTask m;
  m.set_task_id(task_id);
  m.set_force(force);
  m.set_recursive(recursive);
  io_.Flush();  // (a direct call goes out before its cancel)
  if (auto sent = caller_.CancelDirect(m)) return *sent;
  return channel_.SendNow(rpc::CANCEL_TASK, m);
}

Status CoreWorker::Reduce(const rpc::ReduceObjects& m) {
  io_.Flush();  // direct calls producing the inputs go out first
  refs_.RayletAwaits({m.input_ids().begin(), m.input_ids().end()});
  return channel_.Send(rpc::REDUCE_OBJECTS, m);
}

Result<std::vector<std::string>> CoreWorker::ReducedInputs(const std::string& out_id, int64_t timeout_ms) {
  rpc::ObjectIds m;
  m.add_object_ids(out_id);
  PHALANX_ASSIGN_OR_RETURN(auto r,
                           CallFor<rpc::ReducedInputsReply>(rpc::REDUCED_INPUTS, m, timeout_ms, "reduced-inputs"));
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  return std::vector<std::string>(r.input_ids().begin(), r.input_ids().end());
}

Result<std::vector<std::string>> CoreWorker::Rendezvous(const rpc::Rendezvous& m) {
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::RendezvousReply>(rpc::RENDEZVOUS, m, m.timeout_ms(), "rendezvous"));
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  return std::vector<std::string>(r.payloads().begin(), r.payloads().end());
}


Result<rpc::TraceReply> CoreWorker::CollectTrace(uint64_t since_ns, bool all_nodes, int64_t timeout_ms) {
  rpc::TraceRequest m;
  m.set_since_ns(since_ns);
  m.set_all_nodes(all_nodes);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::TraceReply>(rpc::TRACE_COLLECT, m, timeout_ms, "timeline"));
  return r;
}

Result<rpc::MemoryReply> CoreWorker::MemorySummary(uint32_t max_objects, bool all_nodes, int64_t timeout_ms) {
  rpc::MemoryRequest m;
  m.set_max_objects(max_objects);
  m.set_all_nodes(all_nodes);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::MemoryReply>(rpc::MEMORY_SUMMARY, m, timeout_ms, "memory summary"));
  return r;
}

Result<rpc::StatsReply> CoreWorker::Stats(int64_t timeout_ms) {
  rpc::Empty m;
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::StatsReply>(rpc::GET_STATS, m, timeout_ms, "stats"));
  return r;
}

}  // namespace phalanx
