#include "scheduler/task_manager.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>

#include "core/ids.h"
#include "objectstore/shm_region.h"

namespace phalanx::scheduler {

namespace asio = boost::asio;

// The TaskManager alone: a fake worker pool (workers are records with a real
// connection, the far end of a socket pair that nobody reads; pid 0: never
// signalled) over a real ObjectTable and store, and its hooks for other nodes.
class FakePool : public WorkerPoolView {
 public:
  explicit FakePool(asio::io_context& io) : io_(io) {}
  ~FakePool() override {
    for (int fd : peers_) ::close(fd);
  }
  Worker* PopIdle(const WorkerKind& kind) override { return PopIdleIf(kind, nullptr); }
  Worker* PopIdleIf(const WorkerKind& kind, const std::function<bool(const Worker&)>& usable) override {
    for (auto it = idle.begin(); it != idle.end(); ++it) {
      if ((*it)->kind != kind || (usable && !usable(**it))) continue;
      Worker* w = *it;
      idle.erase(it);
      return w;
    }
    return nullptr;
  }
  bool StartWorker(const WorkerKind& kind) override {
    ++started;
    started_kinds.push_back(kind);
    return true;
  }
  size_t num_starting(const WorkerKind&) const override { return 0; }
  bool StopIdleIf(const std::function<bool(const Worker&)>& which) override {
    for (auto it = idle.begin(); it != idle.end(); ++it) {
      if (!which(**it)) continue;
      stopped.push_back(*it);
      idle.erase(it);
      return true;
    }
    return false;
  }
  Status CanStart(rpc::Language language) const override {
    if (language == rpc::LANGUAGE_CPP) return Status::NotFound("this node runs no C++ workers");
    return Status::OK();
  }
  void PushIdle(Worker* w) override { idle.push_back(w); }
  std::vector<Worker*> All() const override {
    std::vector<Worker*> out;
    for (const auto& w : workers) out.push_back(w.get());
    return out;
  }
  size_t size() const override { return workers.size() - stopped.size(); }

  // A registered worker (not yet handed to the TaskManager).
  Worker* Add() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    FramedConnection::Socket s(io_);
    s.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), sv[0]);
    peers_.push_back(sv[1]);
    workers.push_back(std::make_unique<Worker>());
    workers.back()->conn = std::make_shared<FramedConnection>(std::move(s), "test worker");
    return workers.back().get();
  }

  std::deque<Worker*> idle;
  int started = 0;
  std::vector<WorkerKind> started_kinds;
  std::vector<Worker*> stopped;  // by StopIdleIf
  std::vector<std::unique_ptr<Worker>> workers;

 private:
  asio::io_context& io_;
  std::vector<int> peers_;
};

// The other nodes, as far as a test says: a ready task that does not fit here
// goes where `spill` says (nowhere by default); nothing else is out there.
class FakeRemote : public RemoteNodes {
 public:
  std::function<std::string(const rpc::TaskSpec& forward, const ResourceSet& need)> spill;
  std::string Spill(const rpc::TaskSpec& forward, const ResourceSet& need) override {
    return spill ? spill(forward, need) : "";
  }
  bool SpillTo(const std::string&, const rpc::TaskSpec&) override { return false; }
  bool FitsSomewhere(const ResourceSet&) const override { return false; }
  std::string NextSpreadNode() override { return ""; }
  void CancelTask(const std::string&, const rpc::CancelTask&) override {}
  void KillActor(const std::string&, const std::string&, bool, std::function<void(const Status&)> done) override {
    if (done) done(Status::OK());
  }
};

// What the TaskManager tells the raylet: the last warning is kept.
class FakeEvents : public TaskEvents {
 public:
  std::string warned;
  void OnTaskRecord(const rpc::TaskRecord&) override {}
  void Warn(const std::string&, const std::string& message) override { warned = message; }
};

class TaskManagerTest : public ::testing::Test {
 protected:
  TaskManagerTest()
      : store_(objectstore::ShmRegion::Create(1 << 20, "tm-test").value()),
        objects_(&store_),
        pool_(io_),
        ledger_(ResourceSet({{"CPU", 2}})),
        tasks_(io_, &objects_, &pool_, &ledger_, &actors_, &events_, &remote_, nullptr, Options(), "node-a"),
        actors_(&tasks_, &ledger_, &pool_, "node-a") {}
  static TaskManagerOptions Options() {
    TaskManagerOptions o;
    o.infeasible_timeout_ms = 50;
    return o;
  }
  // A task calling `fn` with `args` (object ids; "" for an inline value), needing `cpus`.
  rpc::TaskSpec Spec(const std::string& fn, double cpus = 1, std::vector<std::string> args = {},
                     int max_retries = 0) {
    rpc::TaskSpec s;
    s.set_task_id(Id(++next_));
    s.set_function_name(fn);
    s.set_function_id(fn);
    s.set_num_returns(1);
    s.set_num_cpus(cpus);
    s.set_max_retries(max_retries);
    for (const auto& a : args) {
      auto* arg = s.add_args();
      if (a.empty()) {
        arg->set_data("inline");
      } else {
        arg->set_object_id(a);
      }
    }
    return s;
  }
  std::string Submit(rpc::TaskSpec s) {
    std::string tid = s.task_id();
    objects_.AddRef(Ret(tid));  // the submitter holds its return
    tasks_.Submit(std::move(s));
    return tid;
  }
  static std::string Ret(const std::string& tid) { return MakeObjectId(tid, 1); }
  // The worker running `tid` finishes it with `value`.
  void Done(Worker* w, const std::string& tid, const std::string& value) {
    rpc::TaskDone d;
    d.set_task_id(tid);
    auto* r = d.add_returns();
    r->set_object_id(Ret(tid));
    r->set_data(value);
    tasks_.OnTaskDone(w, d);
  }
  Worker* Running(const std::string& tid) {
    for (Worker* w : pool_.All()) {
      if (std::find(w->inflight.begin(), w->inflight.end(), tid) != w->inflight.end()) return w;
    }
    return nullptr;
  }
  rpc::ObjectValue Value(const std::string& id) {
    rpc::ObjectValue v;
    objects_.Describe(id, &v, false);
    return v;
  }
  static std::string Id(int n) {
    std::string id(kTaskIdSize, '\0');
    std::memcpy(&id[0], &n, sizeof(n));
    return id;
  }

  asio::io_context io_;
  objectstore::ObjectStore store_;
  objectstore::ObjectTable objects_;
  FakePool pool_;
  FakeEvents events_;
  FakeRemote remote_;
  ResourceLedger ledger_;
  TaskManager tasks_;
  ActorManager actors_;
  int next_ = 0;
};

TEST_F(TaskManagerTest, ATaskWaitsForItsArgumentsThenRunsAndItsResultIsStored) {
  pool_.PushIdle(pool_.Add());
  std::string arg = MakeObjectId(Id(1000), 1);
  objects_.AddRef(arg);  // pending: its task has not finished
  std::string t = Submit(Spec("f", 1, {arg, ""}));
  EXPECT_EQ(Running(t), nullptr) << "pushed before its argument was ready";
  objects_.PutInline(arg, "value", {});
  Worker* w = Running(t);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(tasks_.Stats().running, 1u);
  EXPECT_EQ(tasks_.available().Get("CPU"), 1.0);
  Done(w, t, "result");
  rpc::ObjectValue v = Value(Ret(t));
  EXPECT_EQ(v.state(), rpc::OBJ_INLINE);
  EXPECT_EQ(v.data(), "result");
  EXPECT_EQ(tasks_.available().Get("CPU"), 2.0) << "its CPU came back";
  EXPECT_EQ(tasks_.Stats().finished, 1u);
  objects_.RemoveRef(arg);
  EXPECT_TRUE(objects_.WasFreed(arg)) << "the task released its argument";
}

TEST_F(TaskManagerTest, TasksRunAsCpusAllowAndWorkersAreStartedForThem) {
  std::string a = Submit(Spec("f", 2));
  std::string b = Submit(Spec("g", 2));
  EXPECT_GE(pool_.started, 1) << "a worker is started for ready tasks";
  Worker* w1 = pool_.Add();
  tasks_.OnWorkerRegistered(w1);
  EXPECT_EQ(Running(a), w1) << "the first submitted of one shape runs first";
  Worker* w2 = pool_.Add();
  tasks_.OnWorkerRegistered(w2);
  EXPECT_EQ(Running(b), nullptr) << "no CPU left for it while the first runs";
  Done(w1, a, "x");
  EXPECT_NE(Running(b), nullptr);
}

// A task of a runtime environment runs only on a worker of that environment;
// on a node at its worker limit (2 CPUs: 2 workers), an idle worker of
// another environment is stopped to make room, and one of its own started.
TEST_F(TaskManagerTest, ATaskOfAnEnvironmentGetsAWorkerOfItsOwnMakingRoomAtTheLimit) {
  Worker* plain1 = pool_.Add();
  Worker* plain2 = pool_.Add();
  pool_.PushIdle(plain1);
  pool_.PushIdle(plain2);
  rpc::TaskSpec spec = Spec("f", 1);
  auto* v = spec.mutable_runtime_env()->add_env_vars();
  v->set_name("K");
  v->set_value("1");
  WorkerKind kind = WorkerKind::Of(spec);
  std::string t = Submit(spec);
  EXPECT_EQ(Running(t), nullptr) << "ran on a worker of the node's own environment";
  ASSERT_EQ(pool_.stopped.size(), 1u) << "no idle worker of another environment was stopped";
  EXPECT_TRUE(pool_.stopped[0] == plain1 || pool_.stopped[0] == plain2);
  ASSERT_FALSE(pool_.started_kinds.empty());
  EXPECT_TRUE(pool_.started_kinds.back() == kind) << "the worker started was not of its environment";
  Worker* own = pool_.Add();
  own->kind = kind;
  tasks_.OnWorkerRegistered(own);
  EXPECT_EQ(Running(t), own);
  std::string plain_task = Submit(Spec("g", 1));
  Worker* other = Running(plain_task);
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other, own) << "a plain task ran on the environment's worker";
}

TEST_F(TaskManagerTest, AWorkerBlockedInAGetLendsItsCpus) {
  pool_.PushIdle(pool_.Add());
  pool_.PushIdle(pool_.Add());
  std::string parent = Submit(Spec("parent", 2));
  Worker* w = Running(parent);
  ASSERT_NE(w, nullptr);
  std::string child = Submit(Spec("child", 1));
  EXPECT_EQ(Running(child), nullptr);
  tasks_.OnWorkerBlocked(w);  // the parent waits for the child
  Worker* c = Running(child);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c, w);
  Done(c, child, "1");
  tasks_.OnWorkerUnblocked(w);
  Done(w, parent, "2");
  EXPECT_EQ(tasks_.available().Get("CPU"), 2.0);
}

TEST_F(TaskManagerTest, ATaskThatEndsInsideItsGetLeavesTheWorkerUnblockedForItsNextLease) {
  // A cancel (force=False) interrupts a task blocked in a get: it ends with its get still pending at
  // the raylet. The worker's next task must lend its CPUs when it blocks, and give them back after.
  Worker* w = pool_.Add();
  pool_.PushIdle(w);
  std::string first = Submit(Spec("waits", 2));
  ASSERT_EQ(Running(first), w);
  uint64_t first_lease = w->lease_seq;
  tasks_.OnWorkerBlocked(w);
  EXPECT_EQ(tasks_.available().Get("CPU"), 2.0);  // lent
  Done(w, first, "cancelled");                     // ended inside the get: no unblock came
  EXPECT_EQ(tasks_.available().Get("CPU"), 2.0);
  EXPECT_FALSE(w->blocked);
  std::string second = Submit(Spec("waits", 2));
  ASSERT_EQ(Running(second), w);
  EXPECT_NE(w->lease_seq, first_lease);  // (the stale get's end is told apart by this)
  EXPECT_EQ(tasks_.available().Get("CPU"), 0.0);
  tasks_.OnWorkerBlocked(w);
  EXPECT_EQ(tasks_.available().Get("CPU"), 2.0) << "the second task's get lends its CPUs too";
  tasks_.OnWorkerUnblocked(w);
  Done(w, second, "ok");
  EXPECT_EQ(tasks_.available().Get("CPU"), 2.0);
}

TEST_F(TaskManagerTest, TheChildrenABlockedParentWaitsForGoBeforeQueuedParents) {
  pool_.PushIdle(pool_.Add());
  std::string p1 = Submit(Spec("parent", 2));
  Worker* w = Running(p1);
  ASSERT_NE(w, nullptr);
  std::string p2 = Submit(Spec("parent", 2));  // queued before the child: FIFO would run it next
  rpc::TaskSpec c = Spec("child", 2);
  c.set_parent_task_id(p1);
  std::string child = Submit(c);
  EXPECT_EQ(tasks_.MutableSpec(child)->depth(), 1u);  // its parent's depth + 1
  EXPECT_EQ(tasks_.MutableSpec(p2)->depth(), 0u);
  pool_.PushIdle(pool_.Add());  // one worker free for one of them
  tasks_.OnWorkerBlocked(w);    // p1 waits for its child and lends its CPUs
  EXPECT_NE(Running(child), nullptr) << "the child should have the free worker, not the queued parent";
  EXPECT_EQ(Running(p2), nullptr);
  Done(Running(child), child, "1");
  tasks_.OnWorkerUnblocked(w);
  Done(w, p1, "2");
  ASSERT_NE(Running(p2), nullptr);
  Done(Running(p2), p2, "3");
  EXPECT_EQ(tasks_.available().Get("CPU"), 2.0);
}

TEST_F(TaskManagerTest, AWorkerDeathRetriesItsTaskThenFailsItNamingWhy) {
  pool_.PushIdle(pool_.Add());
  std::string t = Submit(Spec("flaky", 1, {}, /*max_retries=*/1));
  Worker* w = Running(t);
  ASSERT_NE(w, nullptr);
  w->dead = true;
  tasks_.OnWorkerDied(w, "worker process 7 was killed by signal 9");
  EXPECT_EQ(Running(t), nullptr);
  EXPECT_EQ(tasks_.Stats().retried, 1u);
  Worker* again = pool_.Add();
  tasks_.OnWorkerRegistered(again);
  ASSERT_EQ(Running(t), again) << "retried on another worker";
  again->dead = true;
  tasks_.OnWorkerDied(again, "worker process 8 was killed by signal 9");
  rpc::ObjectValue v = Value(Ret(t));
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_EQ(v.error_code(), static_cast<int>(StatusCode::kWorkerDied));
  EXPECT_NE(v.error().find("process 8"), std::string::npos) << v.error();
  EXPECT_NE(v.error().find("after 1 retries"), std::string::npos) << v.error();
}

TEST_F(TaskManagerTest, CancelFailsQueuedTasksAndTheirChildrenAndTheyNeverRun) {
  std::string parent = Submit(Spec("parent", 4));  // more CPUs than free: never runs here
  rpc::TaskSpec c = Spec("child", 4);
  c.set_parent_task_id(parent);
  std::string child = Submit(c);
  std::string other = Submit(Spec("other", 4));
  rpc::CancelTask m;
  m.set_task_id(parent);
  m.set_recursive(true);
  tasks_.Cancel(m);
  for (const auto& t : {parent, child}) {
    rpc::ObjectValue v = Value(Ret(t));
    EXPECT_EQ(v.state(), rpc::OBJ_LOST);
    EXPECT_EQ(v.error_code(), static_cast<int>(StatusCode::kCancelled));
  }
  EXPECT_EQ(Value(Ret(other)).state(), rpc::OBJ_PENDING) << "not its child";
  EXPECT_FALSE(tasks_.HasTask(parent));
  EXPECT_TRUE(tasks_.HasTask(other));
}

TEST_F(TaskManagerTest, ARequestNoNodeCanHoldFailsAfterTheTimeoutNamingWhatItAsked) {
  std::string& warned = events_.warned;
  std::string t = Submit(Spec("huge", 64));
  EXPECT_NE(warned.find("no node has that much"), std::string::npos) << warned;
  io_.run_for(std::chrono::milliseconds(200));
  rpc::ObjectValue v = Value(Ret(t));
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_EQ(v.error_code(), static_cast<int>(StatusCode::kInfeasible));
  EXPECT_NE(v.error().find("CPU"), std::string::npos) << v.error();
}

TEST_F(TaskManagerTest, ATaskThatDoesNotFitHereIsSpilledWithItsArgumentsAndTheirRefs) {
  std::vector<rpc::TaskSpec> spilled;
  remote_.spill = [&](const rpc::TaskSpec& f, const ResourceSet&) {
    spilled.push_back(f);
    return std::string("node-b");
  };
  pool_.PushIdle(pool_.Add());
  std::string busy = Submit(Spec("busy", 2));
  ASSERT_NE(Running(busy), nullptr);
  // An argument holding a ref (a list of refs put here) travels by value, its ref with it.
  std::string inner = MakeObjectId(Id(2000), 1), outer = MakeObjectId(Id(2001), 1);
  objects_.AddRef(inner);
  objects_.PutInline(inner, "inner", {});
  objects_.AddRef(outer);
  objects_.PutInline(outer, "[ref]", {inner});
  std::string t = Submit(Spec("moved", 1, {outer}));
  ASSERT_EQ(spilled.size(), 1u);
  const rpc::TaskSpec& f = spilled[0];
  EXPECT_TRUE(f.forwarded());
  ASSERT_EQ(f.args_size(), 1);
  EXPECT_EQ(f.args(0).data(), "[ref]");
  EXPECT_TRUE(f.args(0).object_id().empty());
  ASSERT_EQ(f.contained_ids_size(), 1);
  EXPECT_EQ(f.contained_ids(0), inner);
  EXPECT_EQ(tasks_.Stats().spilled, 1u);
  // Its results come back from there; the task is over here.
  rpc::ForwardTaskReply reply;
  auto* r = reply.add_returns();
  r->set_object_id(Ret(t));
  r->set_data("from node-b");
  tasks_.OnForwardedDone(t, reply);
  EXPECT_EQ(Value(Ret(t)).data(), "from node-b");
  EXPECT_FALSE(tasks_.HasTask(t));
}

TEST_F(TaskManagerTest, ANodeThatCannotBeReachedSpendsNoRetryButOneThatWentAwayDoes) {
  int sends = 0;
  remote_.spill = [&](const rpc::TaskSpec&, const ResourceSet&) {
    ++sends;
    return std::string("node-b");
  };
  pool_.PushIdle(pool_.Add());
  std::string busy = Submit(Spec("busy", 2));
  ASSERT_NE(Running(busy), nullptr);
  std::string t = Submit(Spec("moved", 1, {}, /*max_retries=*/0));
  ASSERT_EQ(sends, 1);
  // Never connected to: the task never ran there, and goes out again as it was.
  for (int k = 0; k < TaskManager::kFreeReplacements; ++k) {
    tasks_.OnForwardFailed(t, "node node-b is unreachable (connection refused)", /*reached=*/false);
    ASSERT_EQ(sends, k + 2);
    EXPECT_EQ(Value(Ret(t)).state(), rpc::OBJ_PENDING);
  }
  EXPECT_EQ(tasks_.Stats().retried, 0u);
  // Past the free ones, or once it was running there, it counts: no retries left.
  tasks_.OnForwardFailed(t, "node node-b is unreachable (connection refused)", /*reached=*/false);
  rpc::ObjectValue v = Value(Ret(t));
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("unreachable"), std::string::npos) << v.error();
  std::string u = Submit(Spec("moved2", 1, {}, /*max_retries=*/0));
  tasks_.OnForwardFailed(u, "node node-b went away (connection reset)", /*reached=*/true);
  EXPECT_EQ(Value(Ret(u)).state(), rpc::OBJ_LOST);
}

TEST_F(TaskManagerTest, ATaskInALanguageThisNodeDoesNotRunFailsAtOnceSayingSo) {
  rpc::TaskSpec s = Spec("cpp_fn");
  s.set_language(rpc::LANGUAGE_CPP);
  std::string t = Submit(s);
  rpc::ObjectValue v = Value(Ret(t));
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find("no C++ workers"), std::string::npos) << v.error();
}

}  // namespace phalanx::scheduler
