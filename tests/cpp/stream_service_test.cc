// StreamService alone (tests/cpp/service_fixture.h): items a worker makes
// reach the reader in order and the end with its count; items of another
// task are dropped and the worker's holds of them let go; items of a task
// whose caller is on another node go there, and when that node cannot be
// reached the worker's store items are let go; a producer's credit is asked
// of the caller's node, and a node that does not answer stops the producer;
// a worker whose read waits lends its CPUs until the item comes.
#include "scheduler/stream_service.h"

#include <map>

#include "core/status_proto.h"
#include "scheduler/worker_pool.h"
#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

// Stores what it is handed, inline, as the TaskService would.
class InlineResults final : public HandedResults {
 public:
  explicit InlineResults(objectstore::ObjectTable* table) : table_(table) {}
  void StoreHandedResults(rpc::TaskDone& m) override {
    for (auto& r : *m.mutable_returns()) {
      stored.push_back(r.object_id());
      if (!r.in_store()) table_->PutInline(r.object_id(), r.data(), {});
    }
  }
  std::vector<std::string> stored;

 private:
  objectstore::ObjectTable* table_;
};

class StreamServiceTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    results_ = std::make_unique<InlineResults>(&table());
    streams_ = std::make_unique<StreamService>(io_, kNode, &table(), &tasks_, &lender_, &peers_, &clients_,
                                               results_.get());
    streams_->AddRoutes(router_);
    worker_client_ = Connect(std::string(kClientIdSize, 'w'), &worker_fd_);
    worker_.pid = 77;
    worker_client_->worker = &worker_;
    worker_client_->is_worker = true;
    task_ = MakeTaskId(client_->client_id, 1);
    rpc::TaskSpec spec;
    spec.set_task_id(task_);
    spec.set_generator(rpc::GENERATOR_STREAMING);
    tasks_.specs[task_] = spec;
  }
  void TearDown() override {
    worker_client_->worker = nullptr;
    ServiceTest::TearDown();
  }
  // Items k of the task (0-based), inline; with `end`, the stream ends after `count` items.
  rpc::TaskDone Items(const std::string& task, std::vector<uint64_t> ks, bool end = false, uint64_t count = 0) {
    rpc::TaskDone m;
    m.set_task_id(task_);
    m.set_item(true);
    for (uint64_t k : ks) {
      auto* r = m.add_returns();
      r->set_object_id(MakeObjectId(task, static_cast<uint32_t>(k + 2)));
      r->set_data("item " + std::to_string(k));
    }
    m.set_stream_end(end);
    m.set_stream_items(count);
    return m;
  }
  // The worker's first item of `task`, put in the store (held by the worker)
  // rather than inline; `*item` is its id.
  rpc::TaskDone StoredItem(const std::string& task, const std::string& data, std::string* item) {
    *item = MakeObjectId(task, 2);
    table().AddRef(*item);
    EXPECT_TRUE(table().PutInStore(*item, data, {}).ok());
    worker_client_->holds.insert(*item);
    rpc::TaskDone m = Items(task, {0});
    m.mutable_returns(0)->set_in_store(true);
    m.mutable_returns(0)->clear_data();
    return m;
  }
  rpc::StreamNextReply Read(uint64_t consumed, uint64_t req) {
    rpc::StreamNext n;
    n.set_task_id(task_);
    n.set_consumed(consumed);
    n.set_timeout_ms(5000);
    Send(rpc::STREAM_NEXT, req, n);
    return Reply<rpc::StreamNextReply>(rpc::STREAM_NEXT, req);
  }

  // The worker's next frame: a STREAM_NEXT reply to `req`.
  rpc::StreamNextReply WorkerReply(uint64_t req) {
    rpc::StreamNextReply r;
    FrameHeader h;
    std::string body;
    EXPECT_TRUE(Next(&h, &body, 10000, worker_fd_));
    EXPECT_EQ(h.type, rpc::STREAM_NEXT);
    EXPECT_EQ(h.request_id, req);
    EXPECT_TRUE(r.ParseFromString(body));
    return r;
  }

  testing::SpecTable tasks_;
  testing::RecordingObjectTasks lender_;
  std::unique_ptr<InlineResults> results_;
  std::unique_ptr<StreamService> streams_;
  std::shared_ptr<Client> worker_client_;
  int worker_fd_ = -1;
  Worker worker_;
  std::string task_;
};

TEST_F(StreamServiceTest, ItemsAWorkerMakesReachTheReaderInOrderAndThenTheEnd) {
  streams_->table().Open(task_, client_->client_id, /*dynamic=*/false);
  streams_->HandleWorkerItems(*worker_client_, Items(task_, {0, 1}));
  auto r = Read(0, 1);
  EXPECT_EQ(r.available(), 2u);
  EXPECT_FALSE(r.ended());
  EXPECT_TRUE(table().IsReady(MakeObjectId(task_, 2)));
  EXPECT_TRUE(table().IsReady(MakeObjectId(task_, 3)));
  streams_->HandleWorkerItems(*worker_client_, Items(task_, {2}, /*end=*/true, /*count=*/3));
  r = Read(2, 2);
  EXPECT_EQ(r.available(), 3u);
  EXPECT_TRUE(r.ended());
}

TEST_F(StreamServiceTest, AWorkerWhoseReadWaitsLendsItsCpusUntilTheItemComes) {
  streams_->table().Open(task_, worker_client_->client_id, /*dynamic=*/false);
  Worker reader;
  reader.pid = 91;
  worker_client_->worker = &reader;
  // An item already there: answered at once, nothing lent.
  streams_->HandleWorkerItems(*worker_client_, Items(task_, {0}));
  rpc::StreamNext n;
  n.set_task_id(task_);
  n.set_consumed(0);
  n.set_timeout_ms(5000);
  Send(rpc::STREAM_NEXT, 1, n, worker_client_);
  EXPECT_EQ(WorkerReply(1).available(), 1u);
  EXPECT_TRUE(lender_.events.empty());
  // The next one waits: the reader's CPUs are lent until the item comes.
  n.set_consumed(1);
  Send(rpc::STREAM_NEXT, 2, n, worker_client_);
  EXPECT_EQ(lender_.events, std::vector<std::string>{"blocked 91"});
  streams_->HandleWorkerItems(*worker_client_, Items(task_, {1}));
  EXPECT_EQ(WorkerReply(2).available(), 2u);
  EXPECT_EQ(lender_.events, (std::vector<std::string>{"blocked 91", "unblocked 91"}));
  worker_client_->worker = &worker_;
}

TEST_F(StreamServiceTest, ItemsOfAnotherTaskAreDroppedAndTheirHoldsLetGo) {
  streams_->table().Open(task_, client_->client_id, /*dynamic=*/false);
  const std::string other_task = MakeTaskId(client_->client_id, 2);
  std::string stray;
  streams_->HandleWorkerItems(*worker_client_, StoredItem(other_task, "not this task's", &stray));
  EXPECT_TRUE(results_->stored.empty());
  EXPECT_FALSE(worker_client_->holds.count(stray));
  EXPECT_TRUE(RunUntil([&] { return !table().Contains(stray); }));
}

TEST_F(StreamServiceTest, ItemsOfATaskFromAnotherNodeGoThereAndAreLetGoWhenItCannotBeReached) {
  tasks_.specs[task_].set_origin_node("caller-node-0001");
  peers_.answer = [](const testing::RecordingPeers::Sent&) -> Result<std::string> {
    return Status::Unavailable("node caller-node-0001 is gone");
  };
  std::string item;
  streams_->HandleWorkerItems(*worker_client_, StoredItem(task_, "a large item", &item));
  ASSERT_EQ(peers_.sent.size(), 1u);
  EXPECT_EQ(peers_.sent[0].node, "caller-node-0001");
  EXPECT_EQ(peers_.sent[0].type, rpc::STREAM_ITEMS);
  EXPECT_TRUE(results_->stored.empty()) << "stored on the caller's node, not here";
  EXPECT_FALSE(worker_client_->holds.count(item)) << "nobody can read it now";
}

TEST_F(StreamServiceTest, CreditIsAskedOfTheCallersNodeAndANodeThatDoesNotAnswerStopsTheProducer) {
  peers_.answer = [](const testing::RecordingPeers::Sent&) -> Result<std::string> {
    return Status::Unavailable("node caller-node-0001 did not answer");
  };
  rpc::StreamCredit c;
  c.set_task_id(task_);
  c.set_need(4);
  c.set_timeout_ms(1000);
  c.set_owner_node("caller-node-0001");
  Send(rpc::STREAM_CREDIT, 5, c, worker_client_);
  FrameHeader h;
  std::string body;
  ASSERT_TRUE(Next(&h, &body, 10000, worker_fd_));
  rpc::StreamCreditReply r;
  ASSERT_TRUE(r.ParseFromString(body));
  EXPECT_EQ(h.request_id, 5u);
  EXPECT_TRUE(r.dropped());
  EXPECT_NE(FromProto(r.status()).message().find("caller-node-0001"), std::string::npos);
  ASSERT_EQ(peers_.sent.size(), 1u);
  EXPECT_EQ(peers_.sent[0].type, rpc::STREAM_CREDIT);
}

TEST_F(StreamServiceTest, AReadersExitDropsItsStreams) {
  streams_->table().Open(task_, client_->client_id, /*dynamic=*/false);
  streams_->OnClientGone(*client_, "driver process 4242 exited");
  rpc::StreamCredit c;
  c.set_task_id(task_);
  c.set_need(1);
  c.set_timeout_ms(1000);
  Send(rpc::STREAM_CREDIT, 6, c, worker_client_);
  FrameHeader h;
  std::string body;
  ASSERT_TRUE(Next(&h, &body, 10000, worker_fd_));
  rpc::StreamCreditReply r;
  ASSERT_TRUE(r.ParseFromString(body));
  EXPECT_TRUE(r.dropped()) << "its producer hears that nobody reads any more";
}

}  // namespace
}  // namespace phalanx::scheduler
