// TaskService alone (tests/cpp/service_fixture.h), with real ObjectRequests
// and StreamService beside it and a fake task queue: a submitted task is
// queued with its returns held for the submitter (and a generator's stream
// opened); a malformed one is refused, told to the client, its returns
// failed, nothing queued; results handed in are stored inline or in the
// store by size; returns a caller expects are held, and lost if it exits
// first; a warning reaches its submitter only; records go to the records;
// a task result from a process that is not a worker closes its connection.
#include "scheduler/task_service.h"

#include "core/status_proto.h"
#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class FakeQueue final : public TaskQueue {
 public:
  void Submit(rpc::TaskSpec spec) override { submitted.push_back(std::move(spec)); }
  void OnWorkerRegistered(Worker*) override {}
  void OnTaskDone(Worker*, rpc::TaskDone done) override { done_tasks.push_back(done.task_id()); }
  void OnTasksRecalled(Worker*, const rpc::TaskIds&) override {}
  void Cancel(const rpc::CancelTask& m) override { cancelled.push_back(m.task_id()); }
  std::vector<rpc::TaskSpec> submitted;
  std::vector<std::string> done_tasks, cancelled;
};

class FakeRecords final : public TaskRecords {
 public:
  void RecordTask(const rpc::TaskRecord& r) override { records.push_back(r.task_id()); }
  std::vector<std::string> records;
};

// The streams hand their items to the TaskService, made after them (as in the raylet, where both are members).
class HandTo final : public HandedResults {
 public:
  void StoreHandedResults(rpc::TaskDone& m) override { to->StoreHandedResults(m); }
  HandedResults* to = nullptr;
};

class TaskServiceTest : public testing::ServiceTest {
 protected:
  static constexpr uint64_t kInline = 64;

  void SetUp() override {
    ServiceTest::SetUp();
    requests_ = std::make_unique<ObjectRequests>(io_, kNode, om_.get(), &object_tasks_, &alive_, gcs_.get(), &clients_,
                                                 5000);
    streams_ = std::make_unique<StreamService>(io_, kNode, &table(), &specs_, &object_tasks_, &peers_, &clients_, &hand_to_);
    service_ = std::make_unique<TaskService>(kNode, kInline, om_.get(), &queue_, streams_.get(), requests_.get(),
                                             &clients_, &records_);
    hand_to_.to = service_.get();
    service_->AddRoutes(router_);
    requests_->AddRoutes(router_);
    streams_->AddRoutes(router_);
  }
  void TearDown() override {
    requests_->Stop();
    ServiceTest::TearDown();
  }
  rpc::TaskSpec Spec(uint64_t n, int num_returns) {
    rpc::TaskSpec s;
    s.set_task_id(MakeTaskId(client_->client_id, n));
    s.set_function_name("f");
    s.set_num_returns(num_returns);
    s.set_num_cpus(1);
    return s;
  }

  FakeQueue queue_;
  FakeRecords records_;
  HandTo hand_to_;
  testing::SpecTable specs_;
  testing::RecordingObjectTasks object_tasks_;
  testing::AllAlive alive_;
  std::unique_ptr<ObjectRequests> requests_;
  std::unique_ptr<StreamService> streams_;
  std::unique_ptr<TaskService> service_;
};

TEST_F(TaskServiceTest, ASubmittedTaskIsQueuedWithItsReturnsHeldForTheSubmitter) {
  rpc::TaskSpec s = Spec(1, 2);
  Send(rpc::SUBMIT_TASK, 0, s);
  ASSERT_EQ(queue_.submitted.size(), 1u);
  EXPECT_EQ(queue_.submitted[0].task_id(), s.task_id());
  EXPECT_TRUE(client_->holds.count(MakeObjectId(s.task_id(), 1)));
  EXPECT_TRUE(client_->holds.count(MakeObjectId(s.task_id(), 2)));
}

TEST_F(TaskServiceTest, AGeneratorsStreamIsOpenedForItsSubmitter) {
  rpc::TaskSpec s = Spec(1, 1);
  s.set_generator(rpc::GENERATOR_STREAMING);
  Send(rpc::SUBMIT_TASK, 0, s);
  rpc::StreamNext n;
  n.set_task_id(s.task_id());
  n.set_timeout_ms(0);
  rpc::TaskDone items;
  items.set_task_id(s.task_id());
  items.set_item(true);
  auto* r = items.add_returns();
  r->set_object_id(MakeObjectId(s.task_id(), 2));
  r->set_data("item 0");
  Send(rpc::DIRECT_RESULTS, 0, items);
  EXPECT_TRUE(table().IsReady(MakeObjectId(s.task_id(), 2))) << "the stream kept the item";
  Send(rpc::STREAM_NEXT, 3, n);
  auto read = Reply<rpc::StreamNextReply>(rpc::STREAM_NEXT, 3);
  EXPECT_EQ(read.available(), 1u) << "the submitter reads its stream";
}

TEST_F(TaskServiceTest, AMalformedTaskIsRefusedToldToTheClientAndItsReturnsFail) {
  rpc::TaskSpec s = Spec(1, 1);
  s.set_num_cpus(-3);
  Send(rpc::SUBMIT_TASK, 0, s);
  EXPECT_TRUE(queue_.submitted.empty());
  FrameHeader h;
  std::string body;
  ASSERT_TRUE(Next(&h, &body));
  EXPECT_EQ(h.type, rpc::CLIENT_WARNING);
  rpc::Status st;
  ASSERT_TRUE(st.ParseFromString(body));
  EXPECT_EQ(FromProto(st).code(), StatusCode::kInvalidArgument);
  rpc::ObjectValue v;
  table().Describe(MakeObjectId(s.task_id(), 1), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST) << "a get of its return says why at once";
}

TEST_F(TaskServiceTest, ResultsHandedInAreStoredInlineOrInTheStoreBySize) {
  const std::string tid = MakeTaskId(client_->client_id, 1);
  const std::string small = MakeObjectId(tid, 1), large = MakeObjectId(tid, 2);
  rpc::ExpectReturns e;
  e.add_task_ids(tid);
  e.add_num_returns(2);
  Send(rpc::EXPECT_RETURNS, 0, e);
  EXPECT_TRUE(client_->expected.count(small) && client_->expected.count(large));
  rpc::TaskDone d;
  d.set_task_id(tid);
  auto* r1 = d.add_returns();
  r1->set_object_id(small);
  r1->set_data("small");
  auto* r2 = d.add_returns();
  r2->set_object_id(large);
  r2->set_data(std::string(kInline * 4, 'L'));
  Send(rpc::DIRECT_RESULTS, 0, d);
  rpc::ObjectValue v;
  table().Describe(small, &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_INLINE);
  table().Describe(large, &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_IN_STORE);
  EXPECT_EQ(v.size(), kInline * 4);
  EXPECT_TRUE(client_->expected.empty()) << "both came";
}

TEST_F(TaskServiceTest, ReturnsACallerExpectsAreLostIfItExitsBeforeTheyCome) {
  const std::string tid = MakeTaskId(client_->client_id, 1);
  rpc::ExpectReturns e;
  e.add_task_ids(tid);
  e.add_num_returns(1);
  Send(rpc::EXPECT_RETURNS, 0, e);
  const std::string id = MakeObjectId(tid, 1);
  table().AddRef(id);  // (someone else holds it too, to read the outcome)
  requests_->OnClientGone(*client_, "driver process 4242 exited");
  rpc::ObjectValue v;
  table().Describe(id, &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_EQ(v.error_code(), static_cast<int>(StatusCode::kObjectLost));
}

TEST_F(TaskServiceTest, AWarningReachesItsSubmitterOnly) {
  int other_fd = -1;
  auto other = Connect(std::string(kClientIdSize, 'o'), &other_fd);
  service_->Warn(other->client_id, "no node has 64 GPUs");
  FrameHeader h;
  std::string body;
  ASSERT_TRUE(Next(&h, &body, 10000, other_fd));
  EXPECT_EQ(h.type, rpc::CLIENT_WARNING);
  rpc::Status st;
  ASSERT_TRUE(st.ParseFromString(body));
  EXPECT_EQ(FromProto(st).message(), "no node has 64 GPUs");
  EXPECT_FALSE(Next(&h, &body, 100)) << "another client heard it";
}

TEST_F(TaskServiceTest, RecordsGoToTheRecordsAndCancelsToTheQueue) {
  rpc::TaskRecord r;
  r.set_task_id(std::string(kTaskIdSize, 'r'));
  service_->OnTaskRecord(r);
  EXPECT_EQ(records_.records, std::vector<std::string>{std::string(kTaskIdSize, 'r')});
  rpc::CancelTask c;
  c.set_task_id(std::string(kTaskIdSize, 'c'));
  Send(rpc::CANCEL_TASK, 0, c);
  EXPECT_EQ(queue_.cancelled, std::vector<std::string>{std::string(kTaskIdSize, 'c')});
}

TEST_F(TaskServiceTest, ATaskResultFromAProcessThatIsNotAWorkerClosesItsConnection) {
  rpc::TaskDone d;
  d.set_task_id(MakeTaskId(client_->client_id, 1));
  Send(rpc::TASK_DONE, 0, d);
  EXPECT_TRUE(queue_.done_tasks.empty());
  EXPECT_TRUE(RunUntil([&] { return client_->conn->closed(); }));
}

}  // namespace
}  // namespace phalanx::scheduler
