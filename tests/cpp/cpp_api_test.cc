// The C++ API end to end: this test program is also its own worker (the
// embedded cluster starts it again in worker mode; main() hands over to
// phalanx::Init() before GoogleTest runs).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "phalanx/api.h"

namespace {

int Plus(int a, int b) { return a + b; }
std::string Concat(std::string a, std::vector<int> v) { return a + ":" + std::to_string(v.size()); }
int Throws(int) { throw std::runtime_error("boom from a remote function"); }
int SleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}

class Acc {
 public:
  static Acc* Create(int start) { return new Acc(start); }
  explicit Acc(int start) : total_(start) {}
  int Add(int x) { return total_ += x; }
  std::vector<int> History(int n) { return std::vector<int>(n, total_); }

 private:
  int total_;
};

}  // namespace

PHALANX_REMOTE(Plus, Concat, Throws, SleepMs);
PHALANX_REMOTE(Acc::Create, &Acc::Add, &Acc::History);

class CppApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { phalanx::Init(); }
  static void TearDownTestSuite() { phalanx::Shutdown(); }
};

TEST_F(CppApiTest, TasksRunAndRefsPassAsArguments) {
  auto a = phalanx::Task(Plus).Remote(1, 2);
  auto b = phalanx::Task(Plus).Remote(a, 10);
  EXPECT_EQ(*phalanx::Get(b), 13);
  auto s = phalanx::Task(Concat).Remote(std::string("n"), std::vector<int>{1, 2, 3});
  EXPECT_EQ(*phalanx::Get(s), "n:3");
}

TEST_F(CppApiTest, ActorKeepsStateAcrossOrderedCalls) {
  auto acc = phalanx::Actor(Acc::Create).SetResources({{"CPU", 0}}).Remote(100);
  std::vector<phalanx::ObjectRef<int>> refs;
  for (int i = 0; i < 20; ++i) refs.push_back(acc.Task(&Acc::Add).Remote(1));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(*phalanx::Get(refs[i]), 101 + i);
  EXPECT_EQ(phalanx::Get(acc.Task(&Acc::History).Remote(3))->size(), 3u);
}

TEST_F(CppApiTest, RemoteExceptionReachesTheCaller) {
  try {
    phalanx::Get(phalanx::Task(Throws).Remote(1));
    FAIL() << "expected RemoteError";
  } catch (const phalanx::RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("boom from a remote function"), std::string::npos);
  }
}

TEST_F(CppApiTest, UnregisteredFunctionIsRejectedAtSubmit) {
  auto unregistered = +[](int x) { return x; };
  EXPECT_THROW(phalanx::Task(unregistered).Remote(1), std::invalid_argument);
}

TEST_F(CppApiTest, AGetBlockedPastTheThresholdSaysWhatItWaitsFor) {
  ::setenv("PHALANX_STUCK_REPORT_S", "1", 1);
  auto slow = phalanx::Task(SleepMs).Remote(2500);
  ::testing::internal::CaptureStderr();
  int got = *phalanx::Get(slow, 10000);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(got, 2500);  // (it went on waiting after the report)
  EXPECT_NE(err.find("phalanx::Get has waited 1 s for object"), std::string::npos) << err;
  EXPECT_NE(err.find("has not finished"), std::string::npos) << err;
  // Within the threshold: nothing said.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(*phalanx::Get(phalanx::Task(Plus).Remote(1, 1)), 2);
  err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("PHALANX_STUCK_REPORT_S");
  EXPECT_EQ(err.find("has waited"), std::string::npos) << err;
}

int main(int argc, char** argv) {
  if (std::getenv("PHALANX_CPP_WORKER") != nullptr) phalanx::Init();  // worker mode: never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
