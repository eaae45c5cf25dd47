// The WorkerPool alone, with real processes (a shell that prints the token
// and pid it was started with, then sleeps): registration by token only,
// deaths reported with how the process ended, idle trimming that spares
// what it is told to, no C++ workers without a command, nothing started
// after KillAll.
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/ids.h"
#include "scheduler/worker_pool.h"
#include "tests/cpp/test_util.h"

namespace phalanx::scheduler {
namespace {

class RecordedDeaths : public WorkerDeaths {
 public:
  void OnWorkerDied(Worker* w, const std::string& why) override { deaths.emplace_back(w->pid, why); }
  std::vector<std::pair<pid_t, std::string>> deaths;
};

class WorkerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::TempDir("worker-pool-test"); }
  void TearDown() override {
    if (pool_) pool_->KillAll(std::chrono::milliseconds(500));
    std::filesystem::remove_all(dir_);
  }
  WorkerPool& Pool(const std::string& command) {
    WorkerPoolOptions o;
    o.worker_command = command;
    o.raylet_socket = dir_ + "/raylet.sock";
    o.session_dir = dir_;
    o.log_dir = dir_;
    pool_ = std::make_unique<WorkerPool>(io_, o, &deaths_);
    return *pool_;
  }
  // Runs the loop until `pred` holds (up to 10 s).
  template <typename Pred>
  bool RunUntil(Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred() && std::chrono::steady_clock::now() < deadline) io_.run_for(std::chrono::milliseconds(10));
    return pred();
  }
  // The (token, pid) each started worker printed, once `n` have.
  std::vector<std::pair<std::string, int>> Started(size_t n) {
    std::vector<std::pair<std::string, int>> out;
    RunUntil([&] {
      out.clear();
      for (const auto& e : std::filesystem::directory_iterator(dir_)) {
        std::ifstream f(e.path());
        std::string token;
        int pid = 0;
        if (e.path().filename().string().rfind("worker-", 0) == 0 && (f >> token >> pid)) out.emplace_back(token, pid);
      }
      return out.size() >= n;
    });
    return out;
  }

  static constexpr char kSleeper[] = "sh -c 'echo \"$PHALANX_WORKER_TOKEN $$\"; exec sleep 30'";
  boost::asio::io_context io_;
  RecordedDeaths deaths_;
  std::unique_ptr<WorkerPool> pool_;
  std::string dir_;
};

TEST_F(WorkerPoolTest, AStartedWorkerRegistersWithItsTokenAndOnlyOnce) {
  WorkerPool& pool = Pool(kSleeper);
  ASSERT_TRUE(pool.StartWorker());
  EXPECT_EQ(pool.num_starting(), 1u);
  auto started = Started(1);
  ASSERT_EQ(started.size(), 1u);
  auto [token, pid] = started[0];
  EXPECT_EQ(pool.Register("not-a-token", pid, nullptr), nullptr);
  Worker* w = pool.Register(token, pid, nullptr);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->pid, pid);
  EXPECT_EQ(pool.num_registered(), 1u);
  EXPECT_EQ(pool.num_starting(), 0u);
  EXPECT_EQ(pool.Find(token), w);
  EXPECT_EQ(pool.Register(token, pid, nullptr), nullptr);  // (a token registers once)
}

TEST_F(WorkerPoolTest, AWorkerThatExitsIsReportedWithHowItEnded) {
  WorkerPool& pool = Pool("sh -c 'exit 3'");
  ASSERT_TRUE(pool.StartWorker());
  ASSERT_TRUE(RunUntil([&] { return !deaths_.deaths.empty(); }));
  EXPECT_NE(deaths_.deaths[0].second.find("exited with code 3"), std::string::npos) << deaths_.deaths[0].second;
  EXPECT_TRUE(RunUntil([&] { return pool.size() == 0; }));  // (its record goes once reaped)
}

TEST_F(WorkerPoolTest, AKilledWorkerIsReportedWithItsSignal) {
  WorkerPool& pool = Pool(kSleeper);
  ASSERT_TRUE(pool.StartWorker());
  auto started = Started(1);
  ASSERT_EQ(started.size(), 1u);
  ASSERT_NE(pool.Register(started[0].first, started[0].second, nullptr), nullptr);
  ::kill(started[0].second, SIGKILL);
  ASSERT_TRUE(RunUntil([&] { return !deaths_.deaths.empty(); }));
  EXPECT_EQ(deaths_.deaths[0].first, started[0].second);
  EXPECT_NE(deaths_.deaths[0].second.find("killed by signal 9"), std::string::npos) << deaths_.deaths[0].second;
  EXPECT_EQ(pool.Find(started[0].first), nullptr);
}

TEST_F(WorkerPoolTest, TrimmingStopsIdleWorkersPastTheirTimeButNotSparedOnes) {
  WorkerPool& pool = Pool(kSleeper);
  ASSERT_TRUE(pool.StartWorker());
  ASSERT_TRUE(pool.StartWorker());
  auto started = Started(2);
  ASSERT_EQ(started.size(), 2u);
  Worker* kept = pool.Register(started[0].first, started[0].second, nullptr);
  Worker* trimmed = pool.Register(started[1].first, started[1].second, nullptr);
  ASSERT_TRUE(kept && trimmed);
  pool.PushIdle(kept);
  pool.PushIdle(trimmed);
  EXPECT_EQ(pool.num_idle(), 2u);
  pool.TrimIdle(0, std::chrono::milliseconds(0), [&](const Worker& w) { return &w == kept; });
  EXPECT_EQ(pool.num_idle(), 1u);
  ASSERT_TRUE(RunUntil([&] { return !deaths_.deaths.empty(); }));
  EXPECT_EQ(deaths_.deaths[0].first, started[1].second);
  EXPECT_EQ(pool.PopIdle(), kept);
}

TEST_F(WorkerPoolTest, ANodeWithoutACppCommandSaysHowToConfigureOne) {
  WorkerPool& pool = Pool(kSleeper);
  Status st = pool.CanStart(rpc::LANGUAGE_CPP);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("--cpp-worker-command"), std::string::npos) << st.ToString();
  EXPECT_FALSE(pool.StartWorker(WorkerKind{rpc::LANGUAGE_CPP, ""}));
  EXPECT_TRUE(pool.CanStart(rpc::LANGUAGE_PYTHON).ok());
}

TEST_F(WorkerPoolTest, AfterKillAllEveryWorkerIsGoneAndNothingStarts) {
  WorkerPool& pool = Pool(kSleeper);
  ASSERT_TRUE(pool.StartWorker());
  auto started = Started(1);
  ASSERT_EQ(started.size(), 1u);
  pool.KillAll(std::chrono::milliseconds(1000));
  EXPECT_NE(::kill(started[0].second, 0), 0);  // (reaped: no such process)
  EXPECT_FALSE(pool.StartWorker());
}

// A runtime environment: its variables (replacing the raylet's own of that
// name) and the environment itself reach the worker; its workers serve only
// its kind; an idle one of another kind can be stopped to make room.
TEST_F(WorkerPoolTest, AWorkerOfAnEnvironmentStartsWithItsVariablesAndServesOnlyItsKind) {
  ::setenv("PHALANX_TEST_SHADOWED", "x", 1);  // (PHALANX_* of the raylet never reach a worker)
  ::setenv("HOME_OF_TEST", "raylet's", 1);
  WorkerPool& pool = Pool(
      "sh -c 'echo \"$PHALANX_WORKER_TOKEN $$ [$HOME_OF_TEST] [$COLOR] [$PHALANX_RUNTIME_ENV] "
      "[$PHALANX_TEST_SHADOWED] [$OMP_NUM_THREADS]\"; exec sleep 30'");
  rpc::RuntimeEnv env;
  auto* v = env.add_env_vars();
  v->set_name("COLOR");
  v->set_value("blue sky");
  v = env.add_env_vars();
  v->set_name("HOME_OF_TEST");
  v->set_value("the task's");
  v = env.add_env_vars();
  v->set_name("OMP_NUM_THREADS");
  v->set_value("7");
  WorkerKind kind{rpc::LANGUAGE_PYTHON, env.SerializeAsString()};
  ASSERT_TRUE(pool.StartWorker(kind));
  ASSERT_TRUE(pool.StartWorker());
  EXPECT_EQ(pool.num_starting(kind), 1u);
  EXPECT_EQ(pool.num_starting(WorkerKind()), 1u);
  auto started = Started(2);
  ASSERT_EQ(started.size(), 2u);
  std::map<std::string, std::string> lines;  // token -> what it printed
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    std::ifstream f(e.path());
    std::string token, line;
    if (e.path().filename().string().rfind("worker-", 0) == 0 && (f >> token) && std::getline(f, line)) {
      lines[token] = line;
    }
  }
  Worker* in_env = nullptr;
  Worker* plain = nullptr;
  for (const auto& [token, pid] : started) {
    Worker* w = pool.Register(token, pid, nullptr);
    ASSERT_NE(w, nullptr);
    (w->kind == kind ? in_env : plain) = w;
  }
  ASSERT_TRUE(in_env && plain);
  EXPECT_EQ(lines[in_env->token], " " + std::to_string(in_env->pid) + " [the task's] [blue sky] [" +
                                      ToHex(kind.env) + "] [] [7]");
  EXPECT_EQ(lines[plain->token], " " + std::to_string(plain->pid) + " [raylet's] [] [] [] [1]");
  pool.PushIdle(in_env);
  pool.PushIdle(plain);
  EXPECT_EQ(pool.PopIdle(kind), in_env);
  EXPECT_EQ(pool.PopIdle(kind), nullptr);
  pool.PushIdle(in_env);
  EXPECT_EQ(pool.PopIdle(), plain);
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_FALSE(pool.StopIdleIf([&](const Worker& w) { return w.kind != kind; }));  // (none idle of another kind)
  EXPECT_TRUE(pool.StopIdleIf([&](const Worker& w) { return w.kind == kind; }));
  EXPECT_EQ(pool.size(), 1u);  // (room made at once, while it exits)
  EXPECT_EQ(pool.PopIdle(kind), nullptr);
  ASSERT_TRUE(RunUntil([&] { return !deaths_.deaths.empty(); }));
  EXPECT_EQ(deaths_.deaths[0].first, in_env->pid);
  EXPECT_EQ(pool.size(), 1u);
  ::unsetenv("PHALANX_TEST_SHADOWED");
  ::unsetenv("HOME_OF_TEST");
}

TEST_F(WorkerPoolTest, AMalformedEnvironmentStartsNothing) {
  WorkerPool& pool = Pool(kSleeper);
  rpc::RuntimeEnv env;
  auto* v = env.add_env_vars();
  v->set_name("PHALANX_WORKER_TOKEN");  // (would pass for another worker)
  v->set_value("stolen");
  EXPECT_FALSE(pool.StartWorker(WorkerKind{rpc::LANGUAGE_PYTHON, env.SerializeAsString()}));
  EXPECT_FALSE(pool.StartWorker(WorkerKind{rpc::LANGUAGE_PYTHON, "\xff\xff not a message"}));
  EXPECT_EQ(pool.size(), 0u);
}

}  // namespace
}  // namespace phalanx::scheduler
