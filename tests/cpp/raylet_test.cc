// The raylet as a process: a real redis-server, a real phalanx-raylet that
// starts real worker processes (tests/cpp/echo_worker.cc), and a C++ driver
// speaking the same protocol as the Python one.
#include <gtest/gtest.h>

#include <signal.h>

#include "core/ids.h"
#include "tests/cpp/test_util.h"
#include "worker/core_worker.h"

namespace phalanx {

class RayletTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>(testing::kClusterToken);
    ::setenv("PHALANX_CLUSTER_TOKEN", testing::kClusterToken, 1);  // the raylet inherits it
    dir_ = testing::TempDir("phalanx-raylet");
    socket_ = dir_ + "/raylet.sock";
    raylet_ = testing::Spawn({PHALANX_RAYLET_PATH, "--socket", socket_, "--session-dir", dir_, "--redis-address",
                              "127.0.0.1:" + std::to_string(redis_->port()), "--worker-command",
                              PHALANX_ECHO_WORKER_PATH, "--num-cpus", "2", "--object-store-memory", "67108864"},
                             dir_ + "/raylet.log");
    CoreWorkerOptions o;
    o.socket_path = socket_;
    o.connect_timeout_ms = 10000;
    auto c = CoreWorker::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    core_ = std::move(c).value();
  }
  void TearDown() override {
    core_.reset();
    testing::Stop(raylet_);
  }

  // Submits `name` with inline string args; returns the first return id.
  std::string Submit(const std::string& name, const std::vector<std::string>& args, double cpus = 1,
                     int retries = 0, const std::vector<std::string>& ref_args = {}) {
    rpc::TaskSpec s;
    s.set_task_id(core_->NextTaskId());
    s.set_function_id(name);
    s.set_function_name(name);
    s.set_num_returns(1);
    s.set_num_cpus(cpus);
    s.set_max_retries(retries);
    for (const auto& a : args) s.add_args()->set_data(a);
    for (const auto& r : ref_args) s.add_args()->set_object_id(r);
    EXPECT_TRUE(core_->SubmitTask(s).ok());
    return MakeObjectId(s.task_id(), 1);
  }
  rpc::ObjectValue GetOne(const std::string& id, int64_t timeout_ms = 30000) {
    auto r = core_->Get({id}, timeout_ms);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value()[0] : rpc::ObjectValue();
  }

  std::unique_ptr<testing::RedisServer> redis_;
  std::string dir_, socket_;
  pid_t raylet_ = 0;
  std::unique_ptr<CoreWorker> core_;
};

TEST_F(RayletTest, RunsManyTasksAndReturnsEachResult) {
  std::vector<std::string> ids;
  for (int i = 0; i < 500; ++i) ids.push_back(Submit("echo", {"v" + std::to_string(i)}));
  auto r = core_->Get(ids, 60000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(r.value()[i].state(), rpc::OBJ_INLINE);
    EXPECT_EQ(r.value()[i].data(), "v" + std::to_string(i));
  }
}

TEST_F(RayletTest, RefArgumentWaitsForItsProducer) {
  std::string slow = Submit("sleep_ms", {"300"});
  std::string dependent = Submit("echo", {"got:"}, 1, 0, {slow});
  EXPECT_EQ(GetOne(dependent).data(), "got:slept");
}

TEST_F(RayletTest, StoreObjectsPassAsArguments) {
  std::string id = core_->NextPutId();
  auto off = core_->CreateObject(id, 5, {}, /*hold=*/true);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  std::memcpy(core_->store_base() + off.value(), "hello", 5);
  ASSERT_TRUE(core_->Seal(id).ok());
  EXPECT_EQ(GetOne(Submit("echo", {">"}, 1, 0, {id})).data(), ">hello");
}

TEST_F(RayletTest, TasksNeedingAllCpusRunOneAtATime) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Submit("sleep_ms", {"300"}, /*cpus=*/2));
  ASSERT_TRUE(core_->Get(ids, 30000).ok());
  // Can never be faster than serial; a lower bound only.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
}

TEST_F(RayletTest, GetTimesOutWithObjectStillPending) {
  std::string id = Submit("sleep_ms", {"2000"});
  auto r = core_->Get({id}, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value()[0].state(), rpc::OBJ_PENDING);
}

TEST_F(RayletTest, CrashedWorkerIsRetriedThenReported) {
  std::string marker = dir_ + "/crashed";
  EXPECT_EQ(GetOne(Submit("crash_once", {marker}, 1, /*retries=*/1)).data(), "survived");
  rpc::ObjectValue v = GetOne(Submit("crash", {}, 1, /*retries=*/2));
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_EQ(v.error_code(), static_cast<int>(StatusCode::kWorkerDied));
  EXPECT_NE(v.error().find("after 2 retries"), std::string::npos) << v.error();
  EXPECT_EQ(GetOne(Submit("echo", {"alive"})).data(), "alive") << "the node still works";
}

TEST_F(RayletTest, DroppedReferencesFreeTheStore) {
  std::string id = core_->NextPutId();
  ASSERT_TRUE(core_->CreateObject(id, 1 << 20, {}, true).ok());
  ASSERT_TRUE(core_->Seal(id).ok());
  core_->AdoptLocalRef(id);
  auto stats = core_->Stats(5000);
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats.value().store_used(), 1u << 20);
  core_->RemoveLocalRef(id);
  ASSERT_TRUE(core_->Flush().ok());
  stats = core_->Stats(5000);
  EXPECT_EQ(stats.value().store_used(), 0u);
}

TEST_F(RayletTest, KilledRayletFailsCallsNamingIt) {
  std::string id = Submit("sleep_ms", {"5000"});
  ::kill(raylet_, SIGKILL);
  auto r = core_->Get({id}, 30000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("raylet at " + socket_), std::string::npos) << r.status().message();
}

}  // namespace phalanx
