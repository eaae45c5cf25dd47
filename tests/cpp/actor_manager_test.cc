#include "scheduler/actor_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>

#include "core/ids.h"

namespace phalanx::scheduler {

// The ActorManager alone: a fake task table (it records what is pushed,
// failed and finished) and a fake worker pool (workers are plain records,
// pid 0: never signalled), over a real ResourceLedger.
class FakeTasks : public TaskTable {
 public:
  void Submit(rpc::TaskSpec spec) override { specs[spec.task_id()] = spec; }
  bool HasTask(const std::string& id) const override { return specs.count(id) && !over.count(id); }
  rpc::TaskSpec* MutableSpec(const std::string& id) override {
    return HasTask(id) ? &specs[id] : nullptr;
  }
  bool BuildForwardSpec(const std::string&, rpc::TaskSpec*) override { return false; }
  bool PushTo(Worker* w, const std::string& id) override {
    w->inflight.push_back(id);
    pushed.push_back(id);
    return true;
  }
  void FailTask(const std::string& id, StatusCode code, const std::string& why) override {
    failed[id] = why;
    codes[id] = code;
    over.insert(id);
  }
  void FinishTask(const std::string& id, bool, const std::string&) override { over.insert(id); }
  void Redispatch() override { ++redispatches; }
  void After(int64_t, std::function<void()>) override {}
  int64_t infeasible_timeout_ms() const override { return 0; }

  std::map<std::string, rpc::TaskSpec> specs;
  std::vector<std::string> pushed;
  std::map<std::string, std::string> failed;
  std::map<std::string, StatusCode> codes;
  std::set<std::string> over;
  int redispatches = 0;
};

class FakeWorkers : public WorkerSource {
 public:
  Worker* PopIdle(const WorkerKind&) override {
    if (idle == 0) return nullptr;
    --idle;
    workers.push_back(std::make_unique<Worker>());
    return workers.back().get();
  }
  Worker* PopIdleIf(const WorkerKind& l, const std::function<bool(const Worker&)>& usable) override {
    if (idle == 0) return nullptr;
    Worker* w = PopIdle(l);
    w->client_id = next_client_id;
    if (!usable || usable(*w)) return w;
    ++idle;  // (it stays idle)
    workers.pop_back();
    return nullptr;
  }
  bool StartWorker(const WorkerKind&) override {
    ++started;
    return true;
  }
  size_t num_starting(const WorkerKind&) const override { return 0; }

  int idle = 0;
  std::string next_client_id = "worker";  // the client id the next idle worker has
  int started = 0;
  std::vector<std::unique_ptr<Worker>> workers;
};

// The cluster's actor directory, as a test answers it (ActorManagerNamesTest).
class FakeDirectory : public ActorDirectory {
 public:
  std::function<void(const std::string& name, const std::string& actor_id, const std::string& stale,
                     std::function<void(Result<std::string>)> cb)>
      claim;
  std::function<void(const std::string& name, const std::string& actor_id)> release;
  std::function<void(const std::string& actor_id, std::function<void(Result<rpc::ActorInfo>)> cb)> locate;
  void ClaimName(const std::string& name, const std::string& actor_id, const std::string& stale,
                 std::function<void(Result<std::string>)> cb) override {
    claim(name, actor_id, stale, std::move(cb));
  }
  void ReleaseName(const std::string& name, const std::string& actor_id) override { release(name, actor_id); }
  void Locate(const std::string& actor_id, std::function<void(Result<rpc::ActorInfo>)> cb) override {
    locate(actor_id, std::move(cb));
  }
  void Publish(const rpc::ActorInfo&) override {}
};

class ActorManagerTest : public ::testing::Test {
 protected:
  // `with_directory`: names are claimed cluster-wide in directory_ (else this node's only).
  explicit ActorManagerTest(bool with_directory = false)
      : ledger_(ResourceSet({{"CPU", 2}})),
        actors_(&tasks_, &ledger_, &pool_, "node-a", with_directory ? &directory_ : nullptr) {}

  // Creates an actor (its creation submitted and ready) needing `cpus`.
  std::string Create(double cpus, int max_restarts = 0, int max_task_retries = 0, const std::string& name = "",
                     const std::string& placement_group = "", bool unordered = false, double placement_cpus = 0) {
    rpc::TaskSpec s;
    s.set_task_id(Id(++next_));
    s.set_actor_id(s.task_id());
    s.set_kind(rpc::TASK_ACTOR_CREATION);
    s.set_function_name("test.Counter");
    s.set_max_restarts(max_restarts);
    s.set_max_task_retries(max_task_retries);
    s.set_actor_name(name);
    s.set_placement_group_id(placement_group);
    s.set_calls_unordered(unordered);
    s.set_placement_cpus(placement_cpus);
    s.set_caller_id(creator_);
    s.set_detached(detached_);
    tasks_.Submit(s);
    ResourceSet need;
    if (cpus > 0) need.Set("CPU", cpus);
    actors_.OnCreationSubmitted(s, need);
    actors_.OnTaskReady(s);
    return s.actor_id();
  }
  // Its constructor returned: the actor is alive.
  void Alive(const std::string& actor) {
    Worker* w = WorkerOf(actor);
    ASSERT_NE(w, nullptr);
    rpc::TaskDone done;
    done.set_task_id(actor);
    w->inflight.erase(std::find(w->inflight.begin(), w->inflight.end(), actor));
    actors_.OnTaskDone(w, tasks_.specs[actor], done);
  }
  std::string Call(const std::string& actor, const std::string& method = "incr") {
    return CallFrom(actor, "driver", /*ready=*/true, method);
  }
  // A call made by `caller`; `ready`: its ref arguments are ready (else Ready() later).
  std::string CallFrom(const std::string& actor, const std::string& caller, bool ready,
                       const std::string& method = "incr") {
    rpc::TaskSpec s;
    s.set_task_id(Id(++next_));
    s.set_actor_id(actor);
    s.set_kind(rpc::TASK_ACTOR_METHOD);
    s.set_method_name(method);
    s.set_caller_id(caller);
    tasks_.Submit(s);
    if (actors_.OnMethodSubmitted(s) && ready) actors_.OnTaskReady(s);
    return s.task_id();
  }
  void Ready(const std::string& call) { actors_.OnTaskReady(tasks_.specs[call]); }
  // Its worker process dies with the calls pushed to it.
  Worker* Crash(const std::string& actor, const std::string& why) {
    Worker* w = WorkerOf(actor);
    w->dead = true;
    actors_.OnWorkerDied(w, w->inflight, why);
    return w;
  }
  Worker* WorkerOf(const std::string& actor) {
    for (auto& w : pool_.workers) {
      if (w->actor_id == actor && !w->dead) return w.get();
    }
    return nullptr;
  }
  static std::string Id(int n) {
    std::string id(kTaskIdSize, '\0');
    id[0] = static_cast<char>(n);
    id[1] = static_cast<char>(n >> 8);
    return id;
  }

  FakeTasks tasks_;
  FakeWorkers pool_;
  ResourceLedger ledger_;
  FakeDirectory directory_;
  ActorManager actors_;
  int next_ = 0;
  std::string creator_ = "driver";  // the caller of the creations Create submits
  bool detached_ = false;
};

TEST_F(ActorManagerTest, AnActorTakesAWorkerAndItsResources) {
  pool_.idle = 1;
  std::string a = Create(1);
  actors_.PlacePending();
  ASSERT_EQ(tasks_.pushed, std::vector<std::string>{a});  // its constructor went to a worker
  EXPECT_DOUBLE_EQ(ledger_.available().Get("CPU"), 1);
  EXPECT_EQ(WorkerOf(a)->actor_id, a);
}

TEST_F(ActorManagerTest, ItWaitsForAWorkerAndForResources) {
  std::string a = Create(1);
  actors_.PlacePending();
  EXPECT_TRUE(tasks_.pushed.empty());
  EXPECT_EQ(pool_.started, 1);  // a worker is on its way
  pool_.idle = 2;
  std::string big = Create(2);  // only 1 CPU is left once the first has its
  actors_.PlacePending();
  EXPECT_EQ(tasks_.pushed, std::vector<std::string>{a});
  EXPECT_EQ(actors_.num_pending(), 1u);
  (void)big;
}

TEST_F(ActorManagerTest, CallsWaitForTheConstructorThenGoInOrder) {
  pool_.idle = 1;
  std::string a = Create(0);
  actors_.PlacePending();
  std::string c1 = Call(a), c2 = Call(a), c3 = Call(a);
  EXPECT_EQ(tasks_.pushed.size(), 1u);  // only the constructor so far
  Alive(a);
  EXPECT_EQ(tasks_.pushed, (std::vector<std::string>{a, c1, c2, c3}));
}

// Ray's order of an actor's calls: per caller. A call waiting for its
// argument holds back its own caller's later calls, not another caller's
// (Ray's test_actor_pass_by_ref_order_optimization).
TEST_F(ActorManagerTest, ACallWaitingForItsArgumentHoldsBackOnlyItsOwnCallersCalls) {
  pool_.idle = 1;
  std::string a = Create(0);
  actors_.PlacePending();
  Alive(a);
  std::string slow = CallFrom(a, "task-1", /*ready=*/false);
  std::string after_slow = CallFrom(a, "task-1", /*ready=*/true);
  std::string other = CallFrom(a, "task-2", /*ready=*/true);
  EXPECT_EQ(tasks_.pushed, (std::vector<std::string>{a, other}));
  Ready(slow);
  EXPECT_EQ(tasks_.pushed, (std::vector<std::string>{a, other, slow, after_slow}));
}

// An async or threaded actor (calls_unordered) takes each call once its own
// arguments are ready (Ray's test_async_actor_execute_out_of_order).
TEST_F(ActorManagerTest, AnUnorderedActorTakesEachCallOnceItsArgumentsAreReady) {
  pool_.idle = 1;
  std::string a = Create(0, 0, 0, "", "", /*unordered=*/true);
  actors_.PlacePending();
  std::string slow = CallFrom(a, "driver", /*ready=*/false);
  std::string fast = CallFrom(a, "driver", /*ready=*/true);
  Alive(a);
  EXPECT_EQ(tasks_.pushed, (std::vector<std::string>{a, fast}));
  Ready(slow);
  EXPECT_EQ(tasks_.pushed, (std::vector<std::string>{a, fast, slow}));
}

TEST_F(ActorManagerTest, ACallCancelledWhileItWaitsIsSkippedAndTheCallsBehindItGo) {
  pool_.idle = 1;
  std::string a = Create(0);
  actors_.PlacePending();
  Alive(a);
  std::string slow = CallFrom(a, "task-1", /*ready=*/false);
  std::string next = CallFrom(a, "task-1", /*ready=*/true);
  EXPECT_EQ(tasks_.pushed, (std::vector<std::string>{a}));
  tasks_.FailTask(slow, StatusCode::kCancelled, "cancelled");  // (no longer a task)
  actors_.OnCallCancelled(a);
  ASSERT_EQ(tasks_.pushed.size(), 2u);
  EXPECT_EQ(tasks_.pushed[1], next);
  EXPECT_EQ(std::count(tasks_.pushed.begin(), tasks_.pushed.end(), slow), 0);
}

TEST_F(ActorManagerTest, ADeadActorFailsItsCallsNamingItAndGivesItsResourcesBack) {
  pool_.idle = 1;
  std::string a = Create(1);
  actors_.PlacePending();
  Alive(a);
  std::string running = Call(a), queued = Call(a);
  Crash(a, "worker process 42 was killed by signal 9");
  EXPECT_EQ(tasks_.codes[running], StatusCode::kActorDied);
  EXPECT_NE(tasks_.failed[running].find("test.Counter"), std::string::npos);
  EXPECT_NE(tasks_.failed[running].find("killed by signal 9"), std::string::npos);
  EXPECT_NE(tasks_.failed[running].find("max_restarts=0"), std::string::npos);
  EXPECT_EQ(tasks_.codes[queued], StatusCode::kActorDied);
  EXPECT_DOUBLE_EQ(ledger_.available().Get("CPU"), 2);
  std::string late = Call(a);
  EXPECT_NE(tasks_.failed[late].find("is dead"), std::string::npos);
}

TEST_F(ActorManagerTest, ARestartedActorRetriesTheInterruptedCallPerMaxTaskRetries) {
  pool_.idle = 2;
  std::string a = Create(1, /*max_restarts=*/1, /*max_task_retries=*/1);
  actors_.PlacePending();
  Alive(a);
  std::string running = Call(a), queued = Call(a);
  Worker* w = Crash(a, "worker process 42 exited");
  EXPECT_TRUE(tasks_.failed.empty());  // both go again on the new worker
  actors_.PlacePending();
  Worker* second = WorkerOf(a);
  ASSERT_NE(second, nullptr);
  ASSERT_NE(second, w);
  Alive(a);
  std::vector<std::string> after(tasks_.pushed.end() - 2, tasks_.pushed.end());
  EXPECT_EQ(after, (std::vector<std::string>{running, queued}));
  EXPECT_EQ(tasks_.specs[running].attempt(), 1);
  // A second death is past max_restarts=1: it dies for good.
  Crash(a, "worker process 43 exited");
  EXPECT_NE(tasks_.failed[running].find("max_restarts=1"), std::string::npos);
}

// Ray's actor that asks for no resources: placed only where a CPU is free,
// holding none once there, so a second one fits beside it.
TEST_F(ActorManagerTest, AnActorOfNoResourcesIsPlacedWhereACpuIsFreeAndHoldsNone) {
  pool_.idle = 3;
  std::vector<int> none;
  ASSERT_TRUE(ledger_.TryAcquire(ResourceSet({{"CPU", 2}}), &none));  // (tasks hold both CPUs)
  std::string a = Create(0, 0, 0, "", "", false, /*placement_cpus=*/1);
  actors_.PlacePending();
  EXPECT_TRUE(tasks_.pushed.empty()) << "no CPU free: it waits";
  ledger_.Release(ResourceSet({{"CPU", 1}}), {});
  actors_.PlacePending();
  EXPECT_EQ(tasks_.pushed, std::vector<std::string>{a});
  EXPECT_DOUBLE_EQ(ledger_.available().Get("CPU"), 1) << "placed, it holds none";
  std::string b = Create(0, 0, 0, "", "", false, /*placement_cpus=*/1);
  actors_.PlacePending();
  EXPECT_EQ(tasks_.pushed, (std::vector<std::string>{a, b}));
}

// Ray's at-most-once calls: with max_task_retries=0, a call made while the
// actor restarts fails at once (ActorUnavailableError), as does the call its
// process died running; a call's own max_task_retries makes it wait.
TEST_F(ActorManagerTest, ACallWithoutRetriesToARestartingActorFailsAsUnavailable) {
  pool_.idle = 2;
  std::string a = Create(1, /*max_restarts=*/1, /*max_task_retries=*/0);
  actors_.PlacePending();
  Alive(a);
  std::string running = Call(a);
  Crash(a, "worker process 42 was killed by signal 9");
  EXPECT_EQ(tasks_.codes[running], StatusCode::kActorUnavailable) << tasks_.failed[running];
  std::string during = Call(a);
  EXPECT_EQ(tasks_.codes[during], StatusCode::kActorUnavailable);
  EXPECT_NE(tasks_.failed[during].find("The actor is restarting"), std::string::npos) << tasks_.failed[during];
  rpc::TaskSpec s;  // .options(max_task_retries=-1): it waits for the new process
  s.set_task_id(Id(++next_));
  s.set_actor_id(a);
  s.set_kind(rpc::TASK_ACTOR_METHOD);
  s.set_method_name("incr");
  s.set_caller_id("driver");
  s.set_call_max_task_retries(-1);
  tasks_.Submit(s);
  ASSERT_TRUE(actors_.OnMethodSubmitted(s));
  actors_.OnTaskReady(s);
  actors_.PlacePending();
  Alive(a);
  EXPECT_EQ(tasks_.pushed.back(), s.task_id());
  EXPECT_EQ(tasks_.failed.count(s.task_id()), 0u);
}

TEST_F(ActorManagerTest, NamesAreUniqueWhileTheActorLives) {
  pool_.idle = 2;
  std::string a = Create(0, 0, 0, "ns/counter");
  EXPECT_TRUE(actors_.Lookup("ns/counter").ok());
  std::string b = Create(0, 0, 0, "ns/counter");
  EXPECT_NE(tasks_.failed[b].find("already exists"), std::string::npos);
  ASSERT_TRUE(actors_.Kill(a, /*no_restart=*/true).ok());
  EXPECT_FALSE(actors_.Lookup("ns/counter").ok());  // the name is free again
}

class ActorManagerNamesTest : public ActorManagerTest {
 protected:
  ActorManagerNamesTest() : ActorManagerTest(/*with_directory=*/true) {}
};

// Names are unique across nodes: a fake GCS registry (name -> owner) whose
// answers the test gives when it likes, and a fake actor table for owners.
TEST_F(ActorManagerNamesTest, ANamedActorIsPlacedOnlyOnceItHasItsNameClusterWide) {
  std::vector<std::function<void(Result<std::string>)>> claims;
  std::vector<std::string> stales, released;
  std::map<std::string, rpc::ActorState> gcs_actors;
  directory_.claim = [&](const std::string&, const std::string&, const std::string& stale,
                         std::function<void(Result<std::string>)> cb) {
    stales.push_back(stale);
    claims.push_back(std::move(cb));
  };
  directory_.release = [&](const std::string& name, const std::string&) { released.push_back(name); };
  directory_.locate = [&](const std::string& id, std::function<void(Result<rpc::ActorInfo>)> cb) {
    auto it = gcs_actors.find(id);
    if (it == gcs_actors.end()) return cb(Status::NotFound("no actor"));
    rpc::ActorInfo info;
    info.set_state(it->second);
    info.set_node_id("node-b");
    cb(info);
  };
  pool_.idle = 3;
  // Won: placed then, and its name freed when it dies.
  std::string a = Create(0, 0, 0, "ns/a");
  actors_.PlacePending();
  EXPECT_TRUE(tasks_.pushed.empty()) << "not placed before the GCS gave it the name";
  bool looked_up = false;
  actors_.WhenNamed("ns/a", [&] { looked_up = true; });
  EXPECT_FALSE(looked_up);
  ASSERT_EQ(claims.size(), 1u);
  claims[0](std::string());
  EXPECT_TRUE(looked_up);
  actors_.PlacePending();
  ASSERT_EQ(tasks_.pushed, std::vector<std::string>{a});
  ASSERT_TRUE(actors_.Kill(a, /*no_restart=*/true).ok());
  Crash(a, "killed");  // (its worker's death is reported)
  EXPECT_EQ(released, std::vector<std::string>{"ns/a"});
  // Lost to a live actor on another node: it dies saying so, never placed.
  std::string b = Create(0, 0, 0, "ns/b");
  gcs_actors["owner-1"] = rpc::ACTOR_ALIVE;
  claims[1](std::string("owner-1"));
  EXPECT_NE(tasks_.failed[b].find("already exists (on node"), std::string::npos) << tasks_.failed[b];
  EXPECT_FALSE(actors_.Lookup("ns/b").ok());
  // Held by a dead actor: taken over from it.
  std::string c = Create(0, 0, 0, "ns/c");
  gcs_actors["owner-2"] = rpc::ACTOR_DEAD;
  claims[2](std::string("owner-2"));
  ASSERT_EQ(claims.size(), 4u);
  EXPECT_EQ(stales[3], "owner-2");
  claims[3](std::string());
  actors_.PlacePending();
  EXPECT_EQ(tasks_.pushed.back(), c);
  EXPECT_EQ(released.size(), 1u) << "a lost name is not freed: it was never this actor's";
}

TEST_F(ActorManagerTest, ACallQueuedThenCancelledIsSkipped) {
  pool_.idle = 1;
  std::string a = Create(0);
  actors_.PlacePending();
  std::string c1 = Call(a), c2 = Call(a), c3 = Call(a);
  tasks_.FailTask(c2, StatusCode::kCancelled, "cancelled");  // (what TaskManager::Cancel does)
  Alive(a);
  EXPECT_EQ(tasks_.pushed, (std::vector<std::string>{a, c1, c3}));
}

TEST_F(ActorManagerTest, ARemovedPlacementGroupTakesItsActors) {
  pool_.idle = 1;
  std::string pg(kTaskIdSize, 'g');
  std::string a = Create(0, 0, 0, "", pg);
  actors_.PlacePending();
  Alive(a);
  actors_.KillGroup(pg, "its placement group was removed");
  std::string late = Call(a);
  EXPECT_NE(tasks_.failed[late].find("placement group was removed"), std::string::npos);
}

TEST_F(ActorManagerTest, AnActorWhoseHandlesAreAllGoneEndsForGoodUnlessDetached) {
  pool_.idle = 3;
  std::string plain = Create(0);
  std::string named = Create(0, /*max_restarts=*/5, 0, "named");
  detached_ = true;
  std::string detached = Create(0, 0, 0, "kept");
  actors_.PlacePending();
  for (const auto& a : {plain, named, detached}) Alive(a);
  std::string queued = Call(plain);
  Worker* w = WorkerOf(plain);
  Worker* named_worker = WorkerOf(named);
  actors_.OnHandlesGone(plain);
  actors_.OnHandlesGone(named);
  actors_.OnHandlesGone(detached);
  actors_.OnHandlesGone(Id(99));  // (the first return of some task: nothing)
  // Dead for good (no restart though max_restarts=5), its process killed; its death report finds it dead.
  actors_.OnWorkerDied(w, w->inflight, "killed");
  actors_.OnWorkerDied(named_worker, named_worker->inflight, "killed");
  EXPECT_NE(tasks_.failed[queued].find("all references to the actor were removed"), std::string::npos)
      << tasks_.failed[queued];
  EXPECT_FALSE(actors_.OnMethodSubmitted(tasks_.specs[CallFrom(named, "driver", true)]));
  EXPECT_TRUE(actors_.Lookup("kept").ok());
  EXPECT_FALSE(actors_.Lookup("named").ok());
  EXPECT_EQ(actors_.num_alive(), 1u);
}

TEST_F(ActorManagerTest, AnActorIsNotPlacedInTheProcessOfACreatorOfLiveActors) {
  // A worker that created an actor owns it: killing that worker later (as this actor's process)
  // would end the other actor too. So the idle worker whose client is "task-worker" is passed over.
  creator_ = "task-worker";
  pool_.idle = 1;
  pool_.next_client_id = "other";
  std::string owned = Create(0);
  actors_.PlacePending();
  Alive(owned);
  creator_ = "driver";
  pool_.idle = 1;
  pool_.next_client_id = "task-worker";
  std::string next = Create(0);
  actors_.PlacePending();
  EXPECT_EQ(WorkerOf(next), nullptr);
  EXPECT_EQ(pool_.started, 1);  // a process of its own is started instead
  EXPECT_EQ(actors_.Owners(), (std::unordered_set<std::string>{"task-worker", "driver"}));
}

}  // namespace phalanx::scheduler

namespace phalanx::scheduler {
namespace {

// No node has the labels any actor asks for: each placement says so.
class NoLabelledNodes : public RemoteNodes {
 public:
  std::string Spill(const rpc::TaskSpec&, const ResourceSet&) override { return ""; }
  bool SpillTo(const std::string&, const rpc::TaskSpec&) override { return false; }
  bool FitsSomewhere(const ResourceSet&) const override { return true; }
  std::string NextSpreadNode() override { return ""; }
  Result<std::string> PlaceByLabels(const rpc::TaskSpec&, const ResourceSet&) override {
    return Status(StatusCode::kInfeasible, "no live node has the labels {zone in (mars)}");
  }
  void CancelTask(const std::string&, const rpc::CancelTask&) override {}
  void KillActor(const std::string&, const std::string&, bool, std::function<void(const Status&)> done) override {
    done(Status::OK());
  }
};

class TimedTasks : public FakeTasks {
 public:
  void After(int64_t, std::function<void()> fn) override { timers.push_back(std::move(fn)); }
  int64_t infeasible_timeout_ms() const override { return 60000; }
  std::vector<std::function<void()>> timers;
};

TEST(ActorManagerLabels, ActorsWaitingForLabelsShareOneRetryTimer) {
  // Each actor used to arm a timer of its own at every look, and each timer looked at them all: the timers
  // multiplied (3 actors: 3^n) until the raylet answered nothing else.
  TimedTasks tasks;
  FakeWorkers pool;
  ResourceLedger ledger(ResourceSet({{"CPU", 2}}));
  NoLabelledNodes remote;
  ActorManager actors(&tasks, &ledger, &pool, "node-a", nullptr, &remote);
  for (int i = 1; i <= 3; ++i) {
    rpc::TaskSpec s;
    s.set_task_id(std::string(kTaskIdSize, static_cast<char>(i)));
    s.set_actor_id(s.task_id());
    s.set_kind(rpc::TASK_ACTOR_CREATION);
    s.set_function_name("test.Labelled");
    auto* c = s.add_label_selector();
    c->set_key("zone");
    c->add_values("mars");
    tasks.Submit(s);
    actors.OnCreationSubmitted(s, ResourceSet());
    actors.OnTaskReady(s);
  }
  actors.PlacePending();  // (the task manager's dispatch does)
  actors.PlacePending();
  EXPECT_EQ(tasks.timers.size(), 1u);
  for (int round = 0; round < 6; ++round) {
    auto due = std::move(tasks.timers);
    tasks.timers.clear();
    for (auto& fn : due) fn();
    EXPECT_EQ(tasks.timers.size(), 1u) << "round " << round;
  }
  EXPECT_TRUE(tasks.failed.empty());  // (they wait: 60 s have not passed)
}

}  // namespace
}  // namespace phalanx::scheduler
