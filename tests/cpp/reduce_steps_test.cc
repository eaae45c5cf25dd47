// ReduceSteps alone, on one node (prev and the input both here): a step adds
// its input to prev into out and keeps out until Drop; a step without an
// input (the caller's final copy) copies prev; an input that does not match
// prev fails the step naming both; a prev that fails fails the step naming
// it; the steps a dead node placed go with it.
#include "collectives/reduce_step.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "objectstore/shm_region.h"
#include "tests/cpp/array_values.h"

namespace phalanx::collectives {
namespace {

class ReduceStepsTest : public ::testing::Test {
 protected:
  ReduceStepsTest() {
    auto region = objectstore::ShmRegion::Create(4 << 20, "reduce-steps-test");
    EXPECT_TRUE(region.ok());
    store_ = std::make_unique<objectstore::ObjectStore>(std::move(region).value());
    table_ = std::make_unique<objectstore::ObjectTable>(store_.get());
    transfer_ = std::make_unique<objectstore::ObjectTransfer>(table_.get(), store_.get(), nullptr);
    steps_ = std::make_unique<ReduceSteps>(io_, table_.get(), store_.get(), transfer_.get(), "self");
  }

  static std::string Id(char c) { return std::string(20, c); }
  template <typename T>
  void Seal(const std::string& id, const std::vector<T>& v, DType dtype) {
    table_->AddRef(id);
    testing::SealArray(*table_, *store_, id, v, dtype);
  }
  rpc::ReduceStep Step(const std::string& out, const std::string& prev, const std::string& input,
                       const std::string& reduce_node = "self") {
    rpc::ReduceStep m;
    m.set_out_id(out);
    m.set_prev_id(prev);
    m.set_prev_node("self");
    m.set_input_id(input);
    m.set_op("sum");
    m.set_prev_name("input 0");
    m.set_input_name("input 1");
    m.set_reduce_node(reduce_node);
    return m;
  }
  // Runs `m`; the outcome of `started` and `done` (Internal "not yet" until they ran).
  std::pair<Status, Status> Run(const rpc::ReduceStep& m) {
    auto started = std::make_shared<Status>(Status::Internal("not yet"));
    auto done = std::make_shared<Status>(Status::Internal("not yet"));
    steps_->Run(m, [started](const Status& st) { *started = st; }, [done](const Status& st) { *done = st; });
    return {*started, *done};
  }

  boost::asio::io_context io_;
  std::unique_ptr<objectstore::ObjectStore> store_;
  std::unique_ptr<objectstore::ObjectTable> table_;
  std::unique_ptr<objectstore::ObjectTransfer> transfer_;
  std::unique_ptr<ReduceSteps> steps_;
};

TEST_F(ReduceStepsTest, AStepAddsItsInputToPrevIntoOutAndKeepsOutUntilDropped) {
  Seal<float>(Id('p'), {1, 2, 3, 4}, DType::kFloat32);
  Seal<float>(Id('i'), {10, 20, 30, 40}, DType::kFloat32);
  table_->AddRef(Id('o'));  // (the next link reads it)
  auto [started, done] = Run(Step(Id('o'), Id('p'), Id('i')));
  EXPECT_TRUE(started.ok()) << started.ToString();
  EXPECT_TRUE(done.ok()) << done.ToString();
  EXPECT_EQ(testing::ReadArray<float>(*table_, *store_, Id('o')), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(steps_->num_steps(), 1u);
  steps_->Drop({Id('o')});
  EXPECT_EQ(steps_->num_steps(), 0u);
  EXPECT_EQ(testing::ReadArray<float>(*table_, *store_, Id('p')), (std::vector<float>{1, 2, 3, 4}))
      << "prev is left as it was";
}

TEST_F(ReduceStepsTest, AStepWaitsForAnInputAWorkerHereHasNotSealedYet) {
  // A direct actor call's result reaches its caller, who places the step,
  // on one connection; the worker's seal reaches this node on another.
  Seal<float>(Id('p'), {1, 2}, DType::kFloat32);
  table_->AddRef(Id('i'));
  testing::SealArray<float>(*table_, *store_, Id('i'), {10, 20}, DType::kFloat32, value_format::kKindValue,
                            /*seal=*/false);
  table_->AddRef(Id('o'));
  rpc::ReduceStep m = Step(Id('o'), Id('p'), Id('i'));
  m.set_wait_ms(1000);
  auto [started, done] = Run(m);
  EXPECT_EQ(started.code(), StatusCode::kInternal) << "not started before the seal: " << started.ToString();
  auto began = std::make_shared<Status>(Status::Internal("not yet"));
  auto ended = std::make_shared<Status>(Status::Internal("not yet"));
  steps_->Run(Step(Id('q'), Id('p'), Id('i')), [began](const Status& st) { *began = st; },
              [ended](const Status& st) { *ended = st; });
  EXPECT_EQ(began->code(), StatusCode::kNotFound) << "without wait_ms it fails at once: " << began->ToString();
  ASSERT_TRUE(table_->SealInStore(Id('i')).ok());
  io_.poll();
  EXPECT_EQ(steps_->num_steps(), 1u);
  EXPECT_EQ(testing::ReadArray<float>(*table_, *store_, Id('o')), (std::vector<float>{11, 22}));
  steps_->Drop({Id('o')});
}

TEST_F(ReduceStepsTest, AStepDroppedWhileWaitingForItsInputNeverStarts) {
  Seal<float>(Id('p'), {1, 2}, DType::kFloat32);
  table_->AddRef(Id('i'));
  testing::SealArray<float>(*table_, *store_, Id('i'), {10, 20}, DType::kFloat32, value_format::kKindValue,
                            /*seal=*/false);
  rpc::ReduceStep m = Step(Id('o'), Id('p'), Id('i'));
  m.set_wait_ms(1000);
  auto started = std::make_shared<Status>(Status::Internal("not yet"));
  steps_->Run(m, [started](const Status& st) { *started = st; }, [](const Status&) {});
  steps_->Drop({Id('o')});
  ASSERT_TRUE(table_->SealInStore(Id('i')).ok());
  io_.poll();
  EXPECT_EQ(started->code(), StatusCode::kCollectiveFailed) << started->ToString();
  EXPECT_EQ(steps_->num_steps(), 0u);
}

TEST_F(ReduceStepsTest, AStepWithoutAnInputCopiesPrev) {
  Seal<double>(Id('p'), {0.5, 1.5}, DType::kFloat64);
  table_->AddRef(Id('o'));
  auto [started, done] = Run(Step(Id('o'), Id('p'), ""));
  EXPECT_TRUE(done.ok()) << done.ToString();
  EXPECT_EQ(testing::ReadArray<double>(*table_, *store_, Id('o')), (std::vector<double>{0.5, 1.5}));
}

TEST_F(ReduceStepsTest, AnInputThatDoesNotMatchPrevFailsTheStepNamingBoth) {
  Seal<float>(Id('p'), {1, 2, 3, 4}, DType::kFloat32);
  Seal<double>(Id('i'), {1, 2}, DType::kFloat64);  // same bytes, another dtype
  table_->AddRef(Id('o'));
  auto [started, done] = Run(Step(Id('o'), Id('p'), Id('i')));
  Status st = started.ok() ? done : started;
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("input 0"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("input 1"), std::string::npos) << st.ToString();
  rpc::ObjectValue v;
  table_->Describe(Id('o'), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST) << "out fails its readers with the reason";
}

TEST_F(ReduceStepsTest, APrevThatFailsFailsTheStepNamingIt) {
  table_->AddRef(Id('p'));  // pending: not made yet
  Seal<float>(Id('i'), {1, 2}, DType::kFloat32);
  table_->AddRef(Id('o'));
  auto started = std::make_shared<Status>(Status::Internal("not yet"));
  auto done = std::make_shared<Status>(Status::Internal("not yet"));
  steps_->Run(Step(Id('o'), Id('p'), Id('i')), [started](const Status& st) { *started = st; },
              [done](const Status& st) { *done = st; });
  table_->MarkLost(Id('p'), StatusCode::kWorkerDied, "the worker making input 0 died");
  Status st = started->ok() ? *done : *started;
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kObjectLost);
  EXPECT_NE(st.message().find("input 0"), std::string::npos) << "names what it could not read: " << st.ToString();
}

TEST_F(ReduceStepsTest, TheStepsADeadNodePlacedGoWithIt) {
  Seal<float>(Id('p'), {1, 2}, DType::kFloat32);
  Seal<float>(Id('i'), {3, 4}, DType::kFloat32);
  Seal<float>(Id('q'), {5, 6}, DType::kFloat32);
  table_->AddRef(Id('o'));
  table_->AddRef(Id('r'));
  Run(Step(Id('o'), Id('p'), Id('i'), /*reduce_node=*/"dead"));
  Run(Step(Id('r'), Id('q'), Id('i'), /*reduce_node=*/"alive"));
  ASSERT_EQ(steps_->num_steps(), 2u);
  steps_->DropFrom("dead");
  EXPECT_EQ(steps_->num_steps(), 1u) << "only the live node's step is left";
}

}  // namespace
}  // namespace phalanx::collectives
