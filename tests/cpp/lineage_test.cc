// Lineage: which specs are kept, for how long, and why a result cannot be rebuilt.
#include "scheduler/lineage.h"

#include <gtest/gtest.h>

namespace phalanx::scheduler {
namespace {

rpc::TaskSpec Spec(const std::string& tid, int returns, int max_retries, rpc::TaskKind kind = rpc::TASK_NORMAL) {
  rpc::TaskSpec s;
  s.set_task_id(tid);
  s.set_function_name("f_" + tid);
  s.set_num_returns(returns);
  s.set_max_retries(max_retries);
  s.set_kind(kind);
  return s;
}

TEST(LineageTest, KeptUntilEveryResultIsFreed) {
  Lineage l(1 << 20);
  l.Record(Spec("t1", 2, 3), 2);
  EXPECT_EQ(l.size(), 1u);
  l.ReturnFreed("t1");
  EXPECT_EQ(l.size(), 1u);
  l.ReturnFreed("t1");
  EXPECT_EQ(l.size(), 0u);
  EXPECT_EQ(l.bytes(), 0u);
  std::string why;
  EXPECT_FALSE(l.TakeForRerun("t1", &why));
  EXPECT_NE(why.find("no spec of the task"), std::string::npos) << why;
}

TEST(LineageTest, TakeForRerunGivesTheSpecOnceWhileRetriesLast) {
  Lineage l(1 << 20);
  rpc::TaskSpec s = Spec("t1", 1, 1);
  s.add_args()->set_data("argument bytes");
  l.Record(s, 1);
  std::string why;
  auto again = l.TakeForRerun("t1", &why);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->args(0).data(), "argument bytes");
  EXPECT_FALSE(l.TakeForRerun("t1", &why));  // taken out until it finishes again
  again->set_attempt(1);
  l.Record(*again, 1);
  EXPECT_FALSE(l.TakeForRerun("t1", &why));
  EXPECT_NE(why.find("no retries left (max_retries=1)"), std::string::npos) << why;
}

TEST(LineageTest, ActorCallsAreNamedNotKept) {
  Lineage l(1 << 20);
  rpc::TaskSpec s = Spec("t1", 1, 3, rpc::TASK_ACTOR_METHOD);
  s.add_args()->set_data(std::string(10000, 'x'));
  l.Record(s, 1);
  EXPECT_LT(l.bytes(), 100u);  // only the name
  std::string why;
  EXPECT_FALSE(l.TakeForRerun("t1", &why));
  EXPECT_NE(why.find("actor method f_t1"), std::string::npos) << why;
}

TEST(LineageTest, TheCapDropsTheOldestAndSaysSo) {
  rpc::TaskSpec big = Spec("t0", 1, 3);
  big.add_args()->set_data(std::string(4000, 'x'));
  Lineage l(10000);  // room for two
  for (const char* tid : {"t1", "t2", "t3"}) {
    big.set_task_id(tid);
    l.Record(big, 1);
  }
  EXPECT_EQ(l.size(), 2u);
  EXPECT_LE(l.bytes(), 10000u);
  EXPECT_EQ(l.dropped(), 1u);
  std::string why;
  EXPECT_FALSE(l.TakeForRerun("t1", &why));
  EXPECT_NE(why.find("passed its cap"), std::string::npos) << why;
  EXPECT_TRUE(l.TakeForRerun("t3", &why));
}

}  // namespace
}  // namespace phalanx::scheduler
