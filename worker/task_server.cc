#include "worker/task_server.h"

#include <algorithm>

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/status_proto.h"

namespace phalanx {

namespace {
constexpr auto kWaitSlice = std::chrono::milliseconds(100);  // interrupt checks this often
}  // namespace

// HeldCalls' view of this process: its object calls, cancels, and NextTask's wake-up.
class TaskServer::HeldArgs : public HeldCalls::Objects {
 public:
  explicit HeldArgs(TaskServer* server) : server_(server) {}
  Result<std::vector<std::string>> WaitAny(const std::vector<std::string>& ids, int64_t timeout_ms) override {
    return server_->objects_->Wait(ids, 1, timeout_ms, /*fetch_local=*/true);
  }
  Result<std::vector<rpc::ObjectValue>> GetNow(const std::vector<std::string>& ids) override {
    return server_->objects_->Get(ids, 0, /*locate_only=*/false);
  }
  void Unpin(const std::string& id) override { server_->objects_->Release(id); }
  bool Cancelled(const std::string& task_id) override { return server_->CancelRequested(task_id, false); }
  void Wake() override {
    std::vector<Frame> wake(1);
    wake[0].header.type = rpc::MSG_NONE;
    server_->raylet_->connection().InjectPush(wake);
  }

 private:
  TaskServer* server_;
};

TaskServer::TaskServer(const WorkerIdentity& me, RayletChannel* raylet, WorkerObjects* objects, DirectIo* io)
    : me_(me),
      raylet_(raylet),
      objects_(objects),
      io_(io),
      held_args_(std::make_unique<HeldArgs>(this)),
      held_(std::make_unique<HeldCalls>(held_args_.get())) {}

TaskServer::~TaskServer() { Stop(); }

void TaskServer::Stop() { held_->Stop(); }  // (its waits end: the connection is closed)

Result<rpc::PushTask> TaskServer::NextTask(int64_t timeout_ms) {
  Deadline deadline = DeadlineAfterMs(timeout_ms);
  const auto& interrupt = raylet_->interrupt();
  while (true) {
    if (auto held = held_->TakeReady()) return StartDirectCall(std::move(*held));
    auto f = raylet_->connection().NextPush(std::min(deadline, Clock::now() + kWaitSlice));
    if (!f.ok()) {
      if (f.status().code() != StatusCode::kTimedOut) return f.status();
      if (Clock::now() >= deadline) return f.status();
      if (interrupt) PHALANX_RETURN_IF_ERROR(interrupt());
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
      io_->Close(f.value().header.request_id);
      continue;
    }
    if (type == rpc::PUSH_TASK) {
      StartPushed(&t);
      return t;
    }
    PHALANX_ASSIGN_OR_RETURN(auto now, TakeDirectCall(f.value().header.request_id, std::move(t)));
    if (now) return std::move(*now);
  }
}

void TaskServer::StartPushed(rpc::PushTask* t) {
  std::lock_guard<std::mutex> l(mu_);
  if (t->spec().kind() == rpc::TASK_ACTOR_CREATION) {
    creations_.insert(t->spec().task_id());
    held_->set_unordered(t->spec().calls_unordered());
  }
  running_tasks_.insert(t->spec().task_id());
  if (!cancelled_.empty() && cancelled_.count(t->spec().task_id())) t->set_cancelled(true);
  if (t->spec().generator() != rpc::GENERATOR_NONE) {
    // Its caller's raylet keeps its stream: the node it was spilled from, else this one.
    stream_owners_[t->spec().task_id()] = t->spec().origin_node().empty() ? me_.node_id : t->spec().origin_node();
  }
}

Result<std::optional<rpc::PushTask>> TaskServer::TakeDirectCall(uint64_t conn, rpc::PushTask t) {
  // A call straight from a caller: its ref arguments live in this node's raylet.
  if (Status valid = ValidateTaskSpec(t.spec()); !valid.ok()) {  // nothing of it runs or is kept
    PHALANX_LOG(Warning) << "refused a direct call: " << valid.message() << "; closing its connection";
    io_->Close(conn);
    return std::optional<rpc::PushTask>();
  }
  HeldCalls::Call call;
  call.caller = conn;
  bool has_refs = false;
  for (const auto& a : t.spec().args()) has_refs = has_refs || !a.object_id().empty();
  bool from_afar = !t.spec().origin_node().empty() && t.spec().origin_node() != me_.node_id;
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
    PHALANX_RETURN_IF_ERROR(raylet_->Send(rpc::FETCH_OBJECTS, m));
    call.fetched.assign(m.object_ids().begin(), m.object_ids().end());
    call.borrowed.assign(t.spec().contained_ids().begin(), t.spec().contained_ids().end());
    for (const auto& id : call.borrowed) objects_->AddLocalRef(id);
  }
  call.task = std::move(t);
  // Its arguments ready and none of its caller's calls waiting before it: it goes now.
  if (!held_->MustWait(conn)) {
    PHALANX_ASSIGN_OR_RETURN(bool ready, held_->TryResolve(&call));
    if (ready) return std::optional<rpc::PushTask>(StartDirectCall(std::move(call)));
  }
  held_->Hold(std::move(call));
  return std::optional<rpc::PushTask>();
}

rpc::PushTask TaskServer::StartDirectCall(HeldCalls::Call call) {
  rpc::PushTask t = std::move(call.task);
  std::lock_guard<std::mutex> l(mu_);
  running_direct_[t.spec().task_id()] = RunningDirect{call.caller, std::move(call.fetched), std::move(call.borrowed)};
  running_tasks_.insert(t.spec().task_id());
  if (!cancelled_.empty() && cancelled_.count(t.spec().task_id())) t.set_cancelled(true);
  if (t.spec().generator() != rpc::GENERATOR_NONE) {
    auto caller = callers_.find(call.caller);
    stream_owners_[t.spec().task_id()] =
        caller == callers_.end() || caller->second.empty() ? me_.node_id : caller->second;
  }
  return t;
}

Status TaskServer::TaskDone(rpc::TaskDone done) {
  RunningDirect direct;
  bool is_direct = false, is_creation = false;
  {
    std::lock_guard<std::mutex> l(mu_);
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
      Status st = StartListening(&done);
      if (!st.ok()) {
        PHALANX_LOG(Warning) << "actor calls will go through the raylet: " << st.ToString();
      }
    }
    return raylet_->SendNow(rpc::TASK_DONE, done);
  }
  // Store objects made for the returns must reach the raylet (sealed) before
  // the caller hands the results in.
  bool held = false;
  for (const auto& r : done.returns()) held = held || r.in_store();
  if (held) {
    done.set_release_holder(me_.client_id);
    done.set_holder_node(me_.node_id);
    PHALANX_RETURN_IF_ERROR(raylet_->Flush());
    Status st = io_->Send(direct.conn, EncodeFrame(rpc::DIRECT_DONE, 0, 0, done));
    if (!st.ok()) return ReleaseHeldReturns(done);  // the caller is gone: so are its results
    return Status::OK();
  }
  // Replies to a burst of calls go out together; the last one at once, by
  // this thread, waking no other: written with those queued before it on
  // its connection (one write), then the other connections' queues.
  if (raylet_->connection().HasPush()) {
    io_->SendLater(direct.conn, EncodeFrame(rpc::DIRECT_DONE, 0, 0, done));
    return Status::OK();
  }
  (void)io_->Send(direct.conn, EncodeFrame(rpc::DIRECT_DONE, 0, 0, done));  // (a failed write closes it)
  io_->Flush();
  return Status::OK();
}

// Store-sized results stay in this node's store, held by this worker, for
// callers on other nodes too: their raylet copies them in ranges (the
// transfer layer) and then tells this node to let go (RELEASE_HELD).
bool TaskServer::ReturnsHeld(const std::string& task_id) {
  std::lock_guard<std::mutex> l(mu_);
  return running_direct_.count(task_id) > 0;
}

void TaskServer::NoteCreated(const std::string& id, uint64_t size) {
  std::lock_guard<std::mutex> l(mu_);
  if (!running_tasks_.empty() && id.size() == kObjectIdSize && running_tasks_.count(TaskIdOf(id))) {
    return_sizes_[id] = size;
  }
}

void TaskServer::ReleaseDirectArgs(const std::vector<std::string>& fetched, const std::vector<std::string>& borrowed) {
  if (!fetched.empty()) {
    rpc::UpdateRefs m;
    for (const auto& id : fetched) m.add_remove(id);
    (void)raylet_->Send(rpc::UPDATE_REFS, m);
  }
  for (const auto& id : borrowed) objects_->RemoveLocalRef(id);
}

Status TaskServer::ReleaseHeldReturns(const rpc::TaskDone& done) {
  rpc::UpdateRefs m;
  for (const auto& r : done.returns()) {
    if (r.in_store()) m.add_remove(r.object_id());
  }
  return raylet_->Send(rpc::UPDATE_REFS, m);
}

void TaskServer::FillReturnSizesLocked(rpc::TaskDone* done) {
  for (auto& r : *done->mutable_returns()) {
    auto sz = return_sizes_.find(r.object_id());
    if (sz == return_sizes_.end()) continue;
    if (r.in_store()) r.set_size(sz->second);
    return_sizes_.erase(sz);
  }
}

Status TaskServer::StartListening(rpc::TaskDone* done) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (serving_) return Status::OK();
    serving_ = true;
  }
  // Callers on this node use a Unix socket (faster); others TCP on the node's address.
  std::string path = me_.session_dir + "/actor-" + ToHex(me_.client_id) + ".sock";
  if (!me_.session_dir.empty() && io_->ListenUnix(path).ok()) done->set_direct_socket(path);
  if (!me_.node_address.empty()) {
    auto port = io_->ListenTcp(me_.node_address);
    if (!port.ok()) return port.status();
    done->set_direct_host(me_.node_address);
    done->set_direct_port(port.value());
  }
  return Status::OK();
}

Status TaskServer::StreamItem(rpc::TaskDone item) {
  item.set_item(true);
  uint64_t conn = 0;
  bool held = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = running_direct_.find(item.task_id());
    if (it != running_direct_.end()) conn = it->second.conn;
    FillReturnSizesLocked(&item);
  }
  for (const auto& r : item.returns()) held = held || r.in_store();
  if (held) {
    // Held by this worker until the caller's raylet takes them over; the
    // seal must reach this node's raylet before anyone asks it for them.
    item.set_release_holder(me_.client_id);
    item.set_holder_node(me_.node_id);
  }
  if (conn == 0) return raylet_->Send(rpc::TASK_DONE, item);  // (the raylet passes it on to the caller's node)
  if (held) PHALANX_RETURN_IF_ERROR(raylet_->Flush());
  Status st = io_->Send(conn, EncodeFrame(rpc::DIRECT_DONE, 0, 0, item));
  if (!st.ok() && held) return ReleaseHeldReturns(item);  // the caller is gone, and whoever would read it
  return Status::OK();
}

Result<rpc::StreamCreditReply> TaskServer::StreamCredit(const std::string& task_id, uint64_t need,
                                                       int64_t timeout_ms) {
  rpc::StreamCredit m;
  m.set_task_id(task_id);
  m.set_need(need);
  m.set_timeout_ms(timeout_ms);
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = stream_owners_.find(task_id);
    if (it == stream_owners_.end()) return Status::InvalidArgument("no generator task " + ToHex(task_id) + " runs here");
    m.set_owner_node(it->second);
  }
  return raylet_->CallFor<rpc::StreamCreditReply>(rpc::STREAM_CREDIT, m, timeout_ms + 5000, "stream credit");
}

void TaskServer::NoteCancel(const std::string& task_id, bool from_raylet) {
  std::lock_guard<std::mutex> l(mu_);
  if (from_raylet) ++raylet_cancels_;
  if (cancelled_.size() > 100000) cancelled_.clear();  // (cancels of tasks that were over already)
  cancelled_.insert(task_id);
}

bool TaskServer::CancelRequested(const std::string& task_id, bool read) {
  if (read) raylet_->connection().Pump(Clock::now());  // (what has arrived, without waiting)
  std::lock_guard<std::mutex> l(mu_);
  return cancelled_.count(task_id) > 0;
}

bool TaskServer::CancelSignalled(const std::string& task_id) {
  // Each SIGUSR2 follows a CANCEL_TASK the raylet sent just before it, which
  // may still be on the way: wait (up to 1 s) until that many have come.
  auto deadline = Clock::now() + std::chrono::seconds(1);
  uint64_t want;
  {
    std::lock_guard<std::mutex> l(mu_);
    want = ++cancel_signals_;
  }
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (raylet_cancels_ >= want) break;
    }
    raylet_->connection().Pump(deadline);
  }
  std::lock_guard<std::mutex> l(mu_);
  cancel_signals_ = std::max(cancel_signals_, raylet_cancels_);  // (signals that came together count once)
  return cancelled_.count(task_id) > 0;
}

void TaskServer::OnCallerFrames(uint64_t conn, std::vector<Frame>& frames) {
  std::vector<Frame> calls;
  for (auto& f : frames) {
    if (f.header.type == rpc::DIRECT_HELLO) {
      rpc::DirectHello hello;
      if (!hello.ParseFromString(f.body)) {
        PHALANX_LOG(Warning) << "malformed hello on a direct connection; closing it";
        return io_->Close(conn);
      }
      std::lock_guard<std::mutex> l(mu_);
      callers_[conn] = hello.node_id();
      continue;
    }
    bool known;
    {
      std::lock_guard<std::mutex> l(mu_);
      known = callers_.count(conn) > 0;
    }
    if (f.header.type == rpc::CANCEL_TASK) {
      rpc::CancelTask m;
      if (!known || !m.ParseFromString(f.body)) {
        PHALANX_LOG(Warning) << "a malformed or early cancel on a direct connection; closing it";
        return io_->Close(conn);
      }
      NoteCancel(m.task_id(), false);
      // Its children were submitted to this node's raylet, which cancels them.
      if (m.recursive()) (void)raylet_->SendNow(rpc::CANCEL_TASK, m);
      calls.push_back(std::move(f));  // (NextTask passes the notice on)
    } else if (f.header.type == rpc::DIRECT_CALL) {
      if (!known) {
        PHALANX_LOG(Warning) << "a direct call before the caller said hello; closing its connection";
        return io_->Close(conn);
      }
      f.header.request_id = conn;  // (NextTask parses and checks it)
      calls.push_back(std::move(f));
    } else {
      PHALANX_LOG(Warning) << "unexpected frame type " << f.header.type << " on a direct connection";
      return io_->Close(conn);
    }
  }
  if (!calls.empty()) raylet_->connection().InjectPush(calls);
}

bool TaskServer::OnClose(uint64_t conn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (callers_.erase(conn) == 0) return false;
  }
  // A caller of this actor went away: its calls not started go too (it hands them to the raylet).
  for (auto& c : held_->DropCaller(conn)) {
    for (const auto& v : c.task.ref_args()) {
      if (v.state() == rpc::OBJ_IN_STORE) objects_->Release(v.object_id());
    }
    ReleaseDirectArgs(c.fetched, c.borrowed);
  }
  return true;
}

}  // namespace phalanx
