#include "core/core_worker.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_set>

#include "core/ids.h"
#include "core/logging.h"
#include "core/trace.h"
#include "core/message_limits.h"
#include "core/status_proto.h"

namespace phalanx {

namespace {
constexpr size_t kFlushBatch = 4096;                 // flush at once past this many changes
constexpr auto kFlushInterval = std::chrono::milliseconds(5);
constexpr auto kWaitSlice = std::chrono::milliseconds(100);  // interrupt checks this often
constexpr auto kSendDelay = std::chrono::microseconds(200);   // one-way messages wait at most this
constexpr size_t kOutBufferBytes = 64 * 1024;                 // ... or until this many bytes
constexpr auto kFullStoreRetry = std::chrono::seconds(1);     // creates retry this long on a full store
}  // namespace

Result<std::unique_ptr<CoreWorker>> CoreWorker::Connect(const CoreWorkerOptions& options) {
  auto conn = BlockingConnection::ConnectUnix(options.socket_path, options.connect_timeout_ms);
  if (!conn.ok()) return conn.status();
  std::unique_ptr<CoreWorker> cw(new CoreWorker(std::move(conn).value()));
  cw->options_ = options;
  if (const char* v = std::getenv("PHALANX_DIRECT_ACTOR_CALLS")) cw->options_.direct_actor_calls = std::string(v) != "0";
  rpc::RegisterClient reg;
  reg.set_client_id(cw->client_id_);
  reg.set_is_worker(options.is_worker);
  reg.set_pid(static_cast<int>(::getpid()));
  reg.set_language(options.language);
  reg.set_worker_token(options.worker_token);
  int fd = -1;
  auto frame = cw->conn_->CallReceivingFd(rpc::REGISTER_CLIENT, reg, &fd, DeadlineAfterMs(options.connect_timeout_ms));
  if (!frame.ok()) return frame.status();
  rpc::RegisterClientReply r;
  if (!r.ParseFromString(frame.value().body)) return Status::Internal("malformed registration reply");
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  if (fd < 0) return Status::Internal("the raylet sent no object store descriptor");
  void* base = ::mmap(nullptr, r.store_capacity(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    ::close(fd);
    return Status::Unavailable(std::string("cannot map the object store: ") + std::strerror(errno));
  }
  cw->store_fd_ = fd;
  cw->store_base_ = static_cast<uint8_t*>(base);
  cw->store_capacity_ = r.store_capacity();
  cw->node_id_ = r.node_id();
  cw->session_dir_ = r.session_dir();
  cw->gcs_address_ = r.gcs_address();
  if (r.inline_threshold() > 0) cw->inline_threshold_ = r.inline_threshold();
  cw->node_address_ = r.node_address();
  cw->cluster_token_ = r.cluster_token();
  // The timeline's events of this worker: the tasks and actor calls it runs.
  if (options.is_worker) trace::OpenProcessRing(cw->session_dir_, cw->node_id_, "worker");
  if (r.tls()) {
    auto tls = TlsContext::Create(r.cluster_token());
    if (!tls.ok()) return tls.status();
    cw->tls_ = tls.value();
  }
  {
    // Warnings from the raylet are printed as they arrive. A worker that
    // blocks in a get gives back the tasks queued behind the running one, so
    // they can run elsewhere (they might be what it waits for).
    BlockingConnection* conn = cw->conn_.get();
    CoreWorker* self = cw.get();
    cw->conn_->SetPushFilter([conn, self](const Frame& f, std::deque<Frame>* queued) {
      if (f.header.type == rpc::CANCEL_TASK) {  // noted now; NextTask passes the notice on too
        rpc::CancelTask m;
        if (m.ParseFromString(f.body)) self->NoteCancel(m.task_id(), true);
        return false;
      }
      if (f.header.type == rpc::UNMAP_IDLE) {  // the flush thread lets go of idle mappings
        self->unmap_idle_ = true;
        self->refs_cv_.notify_one();
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
      (void)conn->Send(rpc::TASKS_RECALLED, 0, gave);
      return true;
    });
  }
  cw->flusher_ = std::thread([p = cw.get()] { p->FlushLoop(); });
  return cw;
}

// HeldCalls' view of this process: the raylet's object calls, cancels, and NextTask's wake-up.
class CoreWorker::HeldArgs : public HeldCalls::Objects {
 public:
  explicit HeldArgs(CoreWorker* cw) : cw_(cw) {}
  Result<std::vector<std::string>> WaitAny(const std::vector<std::string>& ids, int64_t timeout_ms) override {
    return cw_->Wait(ids, 1, timeout_ms, /*fetch_local=*/true);
  }
  Result<std::vector<rpc::ObjectValue>> GetNow(const std::vector<std::string>& ids) override {
    return cw_->Get(ids, 0);
  }
  void Unpin(const std::string& id) override { cw_->Release(id); }
  bool Cancelled(const std::string& task_id) override { return cw_->CancelRequested(task_id, false); }
  void Wake() override {
    std::vector<Frame> wake(1);
    wake[0].header.type = rpc::MSG_NONE;
    cw_->conn_->InjectPush(wake);
  }

 private:
  CoreWorker* cw_;
};

CoreWorker::CoreWorker(std::unique_ptr<BlockingConnection> conn)
    : conn_(std::move(conn)),
      client_id_(RandomBytes(kClientIdSize)),
      held_args_(std::make_unique<HeldArgs>(this)),
      held_(std::make_unique<HeldCalls>(held_args_.get())) {}

CoreWorker::~CoreWorker() {
  Shutdown();
  if (store_base_ != nullptr) ::munmap(store_base_, store_capacity_);
  if (store_fd_ >= 0) ::close(store_fd_);
}

void CoreWorker::Shutdown() {
  {
    std::lock_guard<std::mutex> l(io_mu_);
    if (io_) io_->Stop();  // no more callbacks into this object
  }
  {
    std::lock_guard<std::mutex> l(refs_mu_);
    if (stopping_) return;
    if (FlushLocked().ok()) (void)WriteOutLocked();
    stopping_ = true;
    refs_cv_.notify_all();
  }
  if (flusher_.joinable()) flusher_.join();
  conn_->Shutdown("this process disconnected from the raylet");
  held_->Stop();  // (its waits end: the connection is closed)
}

std::string CoreWorker::NextTaskId(bool actor_call) {
  return MakeTaskId(client_id_, (task_counter_.fetch_add(1) << 2) | (actor_call ? kActorCallIdBit : 0));
}
std::string CoreWorker::NextPutId() {
  return MakeObjectId(MakeTaskId(client_id_, (put_counter_.fetch_add(1) << 1) | 1), 0);
}

namespace {
// Appends the frame to `out`, unless it is larger than a receiver takes.
Status AppendFrame(std::string* out, uint16_t type, uint64_t request_id, const google::protobuf::MessageLite& m) {
  size_t before = out->size();
  *out += EncodeFrame(type, 0, request_id, m);
  size_t body = out->size() - before - kFrameHeaderSize;
  if (body <= MaxFrameBody(type, 0)) return Status::OK();
  out->resize(before);
  return Status::InvalidArgument("a message of " + std::to_string(body >> 20) + " MiB is larger than the " +
                                 std::to_string(MaxFrameBody(type, 0) >> 20) + " MiB a raylet takes for its kind (" +
                                 std::to_string(type) + "); pass large values through the object store (put)");
}
}  // namespace

Status CoreWorker::Send(uint16_t type, const google::protobuf::MessageLite& m) {
  std::lock_guard<std::mutex> l(refs_mu_);
  PHALANX_RETURN_IF_ERROR(FlushLocked());
  bool was_empty = out_buf_.empty();
  PHALANX_RETURN_IF_ERROR(AppendFrame(&out_buf_, type, 0, m));
  if (out_buf_.size() >= kOutBufferBytes) return WriteOutLocked();
  if (was_empty) refs_cv_.notify_one();  // the flusher sends the batch shortly
  return Status::OK();
}

Status CoreWorker::SendNow(uint16_t type, const google::protobuf::MessageLite& m) {
  std::lock_guard<std::mutex> l(refs_mu_);
  PHALANX_RETURN_IF_ERROR(FlushLocked());
  PHALANX_RETURN_IF_ERROR(AppendFrame(&out_buf_, type, 0, m));
  return WriteOutLocked();
}

Status CoreWorker::WriteOutLocked() {
  if (out_buf_.empty()) return Status::OK();
  std::string batch;
  batch.swap(out_buf_);
  return conn_->SendRaw(batch);  // under refs_mu_, so batches keep their order
}

Result<Frame> CoreWorker::Call(uint16_t type, const google::protobuf::MessageLite& m, int64_t timeout_ms) {
  uint64_t id = conn_->NextRequestId();
  {
    std::lock_guard<std::mutex> l(refs_mu_);
    PHALANX_RETURN_IF_ERROR(FlushLocked());
    PHALANX_RETURN_IF_ERROR(AppendFrame(&out_buf_, type, id, m));
    PHALANX_RETURN_IF_ERROR(WriteOutLocked());
  }
  Deadline deadline = timeout_ms < 0 ? DeadlineAfterMs(-1) : DeadlineAfterMs(timeout_ms + options_.grace_ms);
  while (true) {
    Deadline slice = std::min(deadline, Clock::now() + kWaitSlice);
    auto r = conn_->WaitReply(id, slice);
    if (r.ok() || r.status().code() != StatusCode::kTimedOut) return r;
    if (Clock::now() >= deadline) {
      return Status::Unavailable(conn_->peer_name() + " did not answer within " +
                                 std::to_string(options_.grace_ms) + " ms past the request's timeout");
    }
    if (interrupt_) PHALANX_RETURN_IF_ERROR(interrupt_());
  }
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
  return Send(rpc::REGISTER_FUNCTION, m);
}

Result<rpc::GetFunctionReply> CoreWorker::GetFunction(const std::string& id, int64_t timeout_ms) {
  rpc::GetFunction m;
  m.set_function_id(id);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::GetFunctionReply>(rpc::GET_FUNCTION, m, timeout_ms, "function"));
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  return r;
}

Status CoreWorker::SubmitTask(const rpc::TaskSpec& spec) {
  if (spec.kind() == rpc::TASK_ACTOR_METHOD) return SubmitActorCall(spec);
  return Send(rpc::SUBMIT_TASK, spec);
}

Status CoreWorker::PutInline(const std::string& id, const std::string& data, const std::vector<std::string>& contained,
                             bool hold) {
  rpc::PutInline m;
  m.set_object_id(id);
  m.set_data(data);
  m.set_hold(hold);
  for (const auto& c : contained) m.add_contained_ids(c);
  if (hold) {
    std::lock_guard<std::mutex> l(refs_mu_);
    local_values_[id] = data;  // dropped when the adopted ref goes
  }
  return Send(rpc::PUT_INLINE, m);
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
      std::lock_guard<std::mutex> l(server_mu_);
      // A return of a task running now: its size goes with the results.
      if (!running_tasks_.empty() && id.size() == kObjectIdSize && running_tasks_.count(TaskIdOf(id))) {
        return_sizes_[id] = size;
      }
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
  return Send(rpc::SEAL_OBJECT, m);
}

Status CoreWorker::AbortCreate(const std::string& id) {
  rpc::SealObject m;
  m.set_object_id(id);
  return Send(rpc::ABORT_CREATE, m);
}

Result<std::vector<rpc::ObjectValue>> CoreWorker::Get(const std::vector<std::string>& ids, int64_t timeout_ms,
                                                      bool locate_only) {
  Deadline deadline = DeadlineAfterMs(timeout_ms);
  FlushDirect();
  {
    // Results of direct actor calls come to this process: wait for them here.
    std::unique_lock<std::mutex> l(refs_mu_);
    auto pending = [&] {
      if (direct_pending_.empty()) return false;
      for (const auto& id : ids) {
        if (direct_pending_.count(id)) return true;
      }
      return false;
    };
    if (pending()) {
      // A result usually comes within ~150 us: look for it before sleeping.
      auto spin_until = Clock::now() + std::chrono::microseconds(150);
      while (pending() && Clock::now() < spin_until) {
        l.unlock();
        std::this_thread::yield();
        l.lock();
      }
    }
    while (pending() && !stopping_ && Clock::now() < deadline) {
      direct_cv_.wait_until(l, std::min(deadline, Clock::now() + kWaitSlice));
      if (interrupt_ && pending()) {
        l.unlock();
        PHALANX_RETURN_IF_ERROR(interrupt_());
        l.lock();
      }
    }
    if (timeout_ms >= 0) {
      timeout_ms = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    }
  }
  std::vector<rpc::ObjectValue> out(ids.size());
  rpc::GetObjects m;
  std::vector<size_t> asked;  // positions in `out` the raylet answers
  {
    std::lock_guard<std::mutex> l(refs_mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = local_values_.find(ids[i]);
      auto mo = mapped_.find(ids[i]);
      if (it != local_values_.end()) {
        out[i].set_object_id(ids[i]);
        out[i].set_state(rpc::OBJ_INLINE);
        out[i].set_data(it->second);
      } else if (mo != mapped_.end()) {
        out[i].set_object_id(ids[i]);
        out[i].set_state(rpc::OBJ_IN_STORE);
        out[i].set_offset(mo->second.offset);
        out[i].set_size(mo->second.size);
        ++mo->second.views;
      } else {
        m.add_object_ids(ids[i]);
        asked.push_back(i);
      }
    }
  }
  if (asked.empty()) return out;
  m.set_timeout_ms(timeout_ms);
  m.set_locate_only(locate_only);
  PHALANX_ASSIGN_OR_RETURN(Frame f, Call(rpc::GET_OBJECTS, m, timeout_ms));
  rpc::GetObjectsReply r;
  if (!r.ParseFromString(f.body) || static_cast<size_t>(r.objects_size()) != asked.size()) {
    return Status::Internal("malformed get reply");
  }
  PHALANX_RETURN_IF_ERROR(FromProto(r.status()));
  std::lock_guard<std::mutex> l(refs_mu_);
  for (size_t k = 0; k < asked.size(); ++k) {
    rpc::ObjectValue& v = *r.mutable_objects(static_cast<int>(k));
    bool held = local_refs_.count(v.object_id()) > 0;
    if (v.state() == rpc::OBJ_INLINE && held) local_values_[v.object_id()] = v.data();
    if (v.state() == rpc::OBJ_IN_STORE && held) {
      auto [mo, fresh] = mapped_.try_emplace(v.object_id(), MappedObject{v.offset(), v.size(), 0});
      if (!fresh) releases_.push_back(v.object_id());  // already mapped: this pin is extra
      ++mo->second.views;
    }
    out[asked[k]] = std::move(v);
  }
  return out;
}

Result<std::vector<std::string>> CoreWorker::Wait(const std::vector<std::string>& ids, int num_returns,
                                                  int64_t timeout_ms, bool fetch_local) {
  FlushDirect();
  {
    std::lock_guard<std::mutex> l(refs_mu_);
    std::vector<std::string> ready;
    for (const auto& id : ids) {
      if (local_values_.count(id) || mapped_.count(id)) ready.push_back(id);
    }
    if (static_cast<int>(ready.size()) >= num_returns) return ready;
  }
  rpc::WaitObjects m;
  for (const auto& id : ids) m.add_object_ids(id);
  m.set_num_returns(num_returns);
  m.set_timeout_ms(timeout_ms);
  m.set_no_fetch(!fetch_local);
  PHALANX_ASSIGN_OR_RETURN(auto r, CallFor<rpc::WaitObjectsReply>(rpc::WAIT_OBJECTS, m, timeout_ms, "wait"));
  return std::vector<std::string>(r.ready_ids().begin(), r.ready_ids().end());
}

void CoreWorker::Release(const std::string& id) {
  std::lock_guard<std::mutex> l(refs_mu_);
  if (stopping_) return;
  auto mo = mapped_.find(id);
  if (mo != mapped_.end()) {
    if (--mo->second.views > 0 || local_refs_.count(id)) return;  // the mapping stays for later gets
    mapped_.erase(mo);
  }
  releases_.push_back(id);
  refs_cv_.notify_one();
}

void CoreWorker::AddLocalRef(const std::string& id) {
  std::lock_guard<std::mutex> l(refs_mu_);
  if (local_refs_[id]++ == 0) {
    bool wake = dirty_.empty();
    dirty_.emplace(id, false);  // keeps the first recorded state if already dirty
    if (wake) refs_cv_.notify_one();
  }
}

void CoreWorker::AdoptLocalRef(const std::string& id) {
  std::lock_guard<std::mutex> l(refs_mu_);
  ++local_refs_[id];
}

void CoreWorker::RemoveLocalRef(const std::string& id) {
  std::lock_guard<std::mutex> l(refs_mu_);
  auto it = local_refs_.find(id);
  if (it == local_refs_.end()) return;
  if (--it->second > 0) return;
  local_refs_.erase(it);
  local_values_.erase(id);
  direct_pending_.erase(id);
  auto mo = mapped_.find(id);
  if (mo != mapped_.end() && mo->second.views == 0) {
    mapped_.erase(mo);
    releases_.push_back(id);
  }
  if (stopping_) return;
  bool wake = dirty_.empty();
  dirty_.emplace(id, true);
  if (dirty_.size() >= kFlushBatch) {
    if (FlushLocked().ok()) (void)WriteOutLocked();
  } else if (wake) {
    refs_cv_.notify_one();
  }
}

int64_t CoreWorker::LocalRefCount(const std::string& id) {
  std::lock_guard<std::mutex> l(refs_mu_);
  auto it = local_refs_.find(id);
  return it == local_refs_.end() ? 0 : it->second;
}

Status CoreWorker::Flush() {
  std::lock_guard<std::mutex> l(refs_mu_);
  PHALANX_RETURN_IF_ERROR(FlushLocked());
  return WriteOutLocked();
}

Status CoreWorker::FlushLocked() {
  if (stopping_) return Status::OK();
  if (!dirty_.empty()) {
    rpc::UpdateRefs m;
    for (const auto& [id, was_held] : dirty_) {
      bool held = local_refs_.count(id) > 0;
      if (held && !was_held) m.add_add(id);
      if (!held && was_held) m.add_remove(id);
    }
    dirty_.clear();
    if (m.add_size() + m.remove_size() > 0) out_buf_ += EncodeFrame(rpc::UPDATE_REFS, 0, 0, m);
  }
  if (!releases_.empty()) {
    rpc::ObjectIds m;
    for (auto& id : releases_) m.add_object_ids(std::move(id));
    releases_.clear();
    out_buf_ += EncodeFrame(rpc::RELEASE_OBJECTS, 0, 0, m);
  }
  return Status::OK();
}

void CoreWorker::UnmapIdleLocked() {
  for (auto mo = mapped_.begin(); mo != mapped_.end();) {
    if (mo->second.views > 0) {
      ++mo;
      continue;
    }
    releases_.push_back(mo->first);
    mo = mapped_.erase(mo);
  }
}

void CoreWorker::FlushLoop() {
  std::unique_lock<std::mutex> l(refs_mu_);
  while (!stopping_) {
    refs_cv_.wait(l, [&] {
      return stopping_ || !dirty_.empty() || !releases_.empty() || !out_buf_.empty() || unmap_idle_;
    });
    if (stopping_) break;
    if (unmap_idle_.exchange(false)) UnmapIdleLocked();
    // Let a burst accumulate, then send it in one write: messages soon, reference changes lazily.
    auto delay = out_buf_.empty() ? kFlushInterval : kSendDelay;
    refs_cv_.wait_for(l, delay, [&] { return stopping_; });
    if (stopping_) break;
    if (FlushLocked().ok()) (void)WriteOutLocked();
  }
}

Result<rpc::PushTask> CoreWorker::NextTask(int64_t timeout_ms) {
  Deadline deadline = DeadlineAfterMs(timeout_ms);
  while (true) {
    if (auto held = held_->TakeReady()) return StartDirectCall(std::move(*held));
    auto f = conn_->NextPush(std::min(deadline, Clock::now() + kWaitSlice));
    if (!f.ok()) {
      if (f.status().code() != StatusCode::kTimedOut) return f.status();
      if (Clock::now() >= deadline) return f.status();
      if (interrupt_) PHALANX_RETURN_IF_ERROR(interrupt_());
      continue;
    }
    uint16_t type = f.value().header.type;
    if (type == rpc::EXIT_WORKER) return Status::Unavailable("the raylet asked this worker to exit");
    if (type == rpc::CANCEL_TASK) {  // (an async actor cancels the call's asyncio task)
      rpc::CancelTask m;
      if (!m.ParseFromString(f.value().body)) continue;
      rpc::PushTask notice;
      notice.set_cancel(true);
      notice.mutable_spec()->set_task_id(m.task_id());
      return notice;
    }
    if (type != rpc::PUSH_TASK && type != rpc::DIRECT_CALL) continue;  // (MSG_NONE: a held call is ready)
    rpc::PushTask t;
    if (!t.ParseFromString(f.value().body)) {
      if (type == rpc::PUSH_TASK) return Status::Internal("malformed task from the raylet");
      PHALANX_LOG(Warning) << "malformed direct call; closing its connection";
      Io()->Close(f.value().header.request_id);
      continue;
    }
    if (type == rpc::PUSH_TASK) {
      std::lock_guard<std::mutex> l(server_mu_);
      if (t.spec().kind() == rpc::TASK_ACTOR_CREATION) {
        creations_.insert(t.spec().task_id());
        held_->set_unordered(t.spec().calls_unordered());
      }
      running_tasks_.insert(t.spec().task_id());
      if (!cancelled_.empty() && cancelled_.count(t.spec().task_id())) t.set_cancelled(true);
      if (t.spec().generator() != rpc::GENERATOR_NONE) {
        // Its caller's raylet keeps its stream: the node it was spilled from, else this one.
        stream_owners_[t.spec().task_id()] = t.spec().origin_node().empty() ? node_id_ : t.spec().origin_node();
      }
      return t;
    }
    // A call straight from a caller: its ref arguments live in this node's raylet.
    uint64_t conn = f.value().header.request_id;
    if (Status valid = ValidateTaskSpec(t.spec()); !valid.ok()) {  // nothing of it runs or is kept
      PHALANX_LOG(Warning) << "refused a direct call: " << valid.message() << "; closing its connection";
      Io()->Close(conn);
      continue;
    }
    HeldCalls::Call call;
    call.caller = conn;
    bool has_refs = false;
    for (const auto& a : t.spec().args()) has_refs = has_refs || !a.object_id().empty();
    bool from_afar = !t.spec().origin_node().empty() && t.spec().origin_node() != node_id_;
    if (from_afar && (has_refs || t.spec().contained_ids_size() > 0)) {
      // Store objects of a caller on another node: this node's raylet copies
      // them over. Refs nested in the arguments, which the caller's node
      // holds for this one: borrowed here, and held by this worker till done.
      rpc::FetchObjects m;
      for (const auto& a : t.spec().args()) {
        if (!a.object_id().empty()) m.add_object_ids(a.object_id());
      }
      for (const auto& id : t.spec().contained_ids()) m.add_borrowed_ids(id);
      m.set_node_id(t.spec().origin_node());
      PHALANX_RETURN_IF_ERROR(Send(rpc::FETCH_OBJECTS, m));
      call.fetched.assign(m.object_ids().begin(), m.object_ids().end());
      call.borrowed.assign(t.spec().contained_ids().begin(), t.spec().contained_ids().end());
      for (const auto& id : call.borrowed) AddLocalRef(id);
    }
    call.task = std::move(t);
    // Its arguments ready and none of its caller's calls waiting before it: it goes now.
    if (!held_->MustWait(conn)) {
      PHALANX_ASSIGN_OR_RETURN(bool ready, held_->TryResolve(&call));
      if (ready) return StartDirectCall(std::move(call));
    }
    held_->Hold(std::move(call));
  }
}

rpc::PushTask CoreWorker::StartDirectCall(HeldCalls::Call call) {
  rpc::PushTask t = std::move(call.task);
  std::lock_guard<std::mutex> l(server_mu_);
  running_direct_[t.spec().task_id()] = RunningDirect{call.caller, std::move(call.fetched), std::move(call.borrowed)};
  running_tasks_.insert(t.spec().task_id());
  if (!cancelled_.empty() && cancelled_.count(t.spec().task_id())) t.set_cancelled(true);
  if (t.spec().generator() != rpc::GENERATOR_NONE) {
    auto caller = callers_.find(call.caller);
    stream_owners_[t.spec().task_id()] = caller == callers_.end() || caller->second.empty() ? node_id_ : caller->second;
  }
  return t;
}

Status CoreWorker::TaskDone(rpc::TaskDone done) {
  RunningDirect direct;
  bool is_direct = false, is_creation = false;
  {
    std::lock_guard<std::mutex> l(server_mu_);
    auto it = running_direct_.find(done.task_id());
    if (it != running_direct_.end()) {
      direct = it->second;
      is_direct = true;
      running_direct_.erase(it);
    }
    is_creation = creations_.erase(done.task_id()) > 0;
    running_tasks_.erase(done.task_id());
    stream_owners_.erase(done.task_id());
    cancelled_.erase(done.task_id());
    FillReturnSizesLocked(&done);
  }
  ReleaseDirectArgs(direct.fetched, direct.borrowed);
  if (!is_direct) {
    if (is_creation && done.error().empty()) {
      Status st = StartDirectServer(&done);
      if (!st.ok()) {
        PHALANX_LOG(Warning) << "actor calls will go through the raylet: " << st.ToString();
      }
    }
    return SendNow(rpc::TASK_DONE, done);
  }
  // Store objects made for the returns must reach the raylet (sealed) before
  // the caller hands the results in.
  bool held = false;
  for (const auto& r : done.returns()) held = held || r.in_store();
  if (held) {
    done.set_release_holder(client_id_);
    done.set_holder_node(node_id_);
    PHALANX_RETURN_IF_ERROR(Flush());
  }
  if (held) {
    Status st = Io()->Send(direct.conn, EncodeFrame(rpc::DIRECT_DONE, 0, 0, done));
    if (!st.ok()) return ReleaseHeldReturns(done);  // the caller is gone: so are its results
    return Status::OK();
  }
  // Replies to a burst of calls go out together; the last one at once.
  Io()->SendLater(direct.conn, EncodeFrame(rpc::DIRECT_DONE, 0, 0, done));
  if (!conn_->HasPush()) Io()->Flush();
  return Status::OK();
}

void CoreWorker::ReleaseDirectArgs(const std::vector<std::string>& fetched, const std::vector<std::string>& borrowed) {
  if (!fetched.empty()) {
    rpc::UpdateRefs m;
    for (const auto& id : fetched) m.add_remove(id);
    (void)Send(rpc::UPDATE_REFS, m);
  }
  for (const auto& id : borrowed) RemoveLocalRef(id);
}

void CoreWorker::FillReturnSizesLocked(rpc::TaskDone* done) {
  for (auto& r : *done->mutable_returns()) {
    auto sz = return_sizes_.find(r.object_id());
    if (sz == return_sizes_.end()) continue;
    if (r.in_store()) r.set_size(sz->second);
    return_sizes_.erase(sz);
  }
}

void CoreWorker::NoteCancel(const std::string& task_id, bool from_raylet) {
  std::lock_guard<std::mutex> l(server_mu_);
  if (from_raylet) ++raylet_cancels_;
  if (cancelled_.size() > 100000) cancelled_.clear();  // (cancels of tasks that were over already)
  cancelled_.insert(task_id);
}

bool CoreWorker::CancelRequested(const std::string& task_id, bool read) {
  if (read) conn_->Pump(Clock::now());  // (what has arrived, without waiting)
  std::lock_guard<std::mutex> l(server_mu_);
  return cancelled_.count(task_id) > 0;
}

bool CoreWorker::CancelSignalled(const std::string& task_id) {
  // Each SIGUSR2 follows a CANCEL_TASK the raylet sent just before it, which
  // may still be on the way: wait (up to 1 s) until that many have come.
  auto deadline = Clock::now() + std::chrono::seconds(1);
  uint64_t want;
  {
    std::lock_guard<std::mutex> l(server_mu_);
    want = ++cancel_signals_;
  }
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> l(server_mu_);
      if (raylet_cancels_ >= want) break;
    }
    conn_->Pump(deadline);
  }
  std::lock_guard<std::mutex> l(server_mu_);
  cancel_signals_ = std::max(cancel_signals_, raylet_cancels_);  // (signals that came together count once)
  return cancelled_.count(task_id) > 0;
}

Status CoreWorker::CreatePlacementGroup(const rpc::PlacementGroupInfo& info) {
  rpc::CreatePlacementGroup m;
  *m.mutable_info() = info;
  return SendNow(rpc::PG_CREATE, m);
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
  FlushDirect();  // (a direct call goes out before its cancel)
  {
    std::lock_guard<std::mutex> l(routes_mu_);
    auto call = direct_calls_.find(task_id);
    if (call != direct_calls_.end()) {
      auto r = routes_.find(call->second.spec.actor_id());
      if (r != routes_.end() && r->second.conn != 0) {
        return Io()->Send(r->second.conn, EncodeFrame(rpc::CANCEL_TASK, 0, 0, m));
      }
    }
  }
  return SendNow(rpc::CANCEL_TASK, m);
}

Status CoreWorker::Reduce(const rpc::ReduceObjects& m) {
  FlushDirect();  // direct calls producing the inputs go out first
  return Send(rpc::REDUCE_OBJECTS, m);
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

Status CoreWorker::Locate(const rpc::LocateObjects& m) { return Send(rpc::LOCATE_OBJECTS, m); }

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
