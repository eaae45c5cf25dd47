// Lineage: which specs are kept, for how long, and why a result cannot be rebuilt.
#include "scheduler/lineage.h"

#include <gtest/gtest.h>

#include <vector>

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

TEST(LineageTest, KeptUntilEveryExposedResultIsCopiedHereOrFreed) {
  Lineage l(1 << 20);
  l.Record(Spec("t1", 3, 3), {1, 3});  // result 2 came back in the reply: never exposed
  EXPECT_EQ(l.size(), 1u);
  l.ReturnSafe("t1", 2);
  l.ReturnSafe("t1", 1);  // copied here
  EXPECT_EQ(l.size(), 1u);
  l.ReturnSafe("t1", 1);  // (twice: counted once)
  EXPECT_EQ(l.size(), 1u);
  l.ReturnSafe("t1", 3);  // freed
  EXPECT_EQ(l.size(), 0u);
  EXPECT_EQ(l.bytes(), 0u);
  std::string why;
  EXPECT_FALSE(l.TakeForRerun("t1", &why));
  EXPECT_NE(why.find("no spec of the task"), std::string::npos) << why;
  l.Record(Spec("t2", 1, 3), {});  // nothing exposed: nothing kept
  EXPECT_EQ(l.size(), 0u);
}

TEST(LineageTest, TheArgumentsHeldAreReleasedOnceWhenTheEntryGoesOrHandedToTheRerun) {
  std::vector<std::string> released;
  Lineage l(1 << 20, [&](std::vector<std::string> held) {
    released.insert(released.end(), held.begin(), held.end());
  });
  l.Record(Spec("t1", 1, 3), {1}, {"arg-a", "arg-b"});
  EXPECT_TRUE(released.empty());
  l.ReturnSafe("t1", 1);
  EXPECT_EQ(released, (std::vector<std::string>{"arg-a", "arg-b"}));
  released.clear();
  l.Record(Spec("t2", 1, 0), {}, {"arg-c"});  // not kept: released at once
  EXPECT_EQ(released, (std::vector<std::string>{"arg-c"}));
  released.clear();
  l.Record(Spec("t3", 1, 3), {1}, {"arg-d"});
  std::string why;
  auto rerun = l.TakeForRerun("t3", &why);
  ASSERT_TRUE(rerun);
  EXPECT_EQ(rerun->held, (std::vector<std::string>{"arg-d"}));  // the caller's to release, after the rerun holds its own
  EXPECT_TRUE(released.empty());
  // The release may come back into the lineage (freeing an argument frees another task's result).
  Lineage nested(1 << 20, nullptr);
  Lineage* self = &nested;
  int calls = 0;
  Lineage outer(1 << 20, [&](std::vector<std::string>) {
    ++calls;
    self->ReturnSafe("inner", 1);
  });
  nested.Record(Spec("inner", 1, 3), {1});
  outer.Record(Spec("p", 1, 3), {1}, {"x"});
  outer.ReturnSafe("p", 1);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(nested.size(), 0u);
}

TEST(LineageTest, TakeForRerunGivesTheSpecOnceWhileRetriesLast) {
  Lineage l(1 << 20);
  rpc::TaskSpec s = Spec("t1", 1, 1);
  s.add_args()->set_data("argument bytes");
  l.Record(s, {1});
  std::string why;
  auto again = l.TakeForRerun("t1", &why);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->spec.args(0).data(), "argument bytes");
  EXPECT_FALSE(l.TakeForRerun("t1", &why));  // taken out until it finishes again
  again->spec.set_attempt(1);
  l.Record(again->spec, {1});
  EXPECT_FALSE(l.TakeForRerun("t1", &why));
  EXPECT_NE(why.find("no retries left (max_retries=1)"), std::string::npos) << why;
}

TEST(LineageTest, ActorCallsAreNamedNotKept) {
  Lineage l(1 << 20);
  rpc::TaskSpec s = Spec("t1", 1, 3, rpc::TASK_ACTOR_METHOD);
  s.add_args()->set_data(std::string(10000, 'x'));
  l.Record(s, {1});
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
    l.Record(big, {1});
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
