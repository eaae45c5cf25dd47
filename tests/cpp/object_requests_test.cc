// ObjectRequests alone (tests/cpp/service_fixture.h: an in-memory object
// layer, a real redis-server, a client on a socket pair): a get waits for
// its object and answers its value, a get of an object no process of the
// cluster made fails at once naming it, a deadline answers what is not
// there yet, a wait answers once enough are ready, a worker blocked in a
// get lends its resources back until it returns, and a client's exit lets
// go of what it held; a get of several ends at the first failure.
#include "scheduler/object_requests.h"

#include <cstring>

#include "core/value_format.h"
#include "scheduler/worker_pool.h"
#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class ObjectRequestsTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    requests_ = std::make_unique<ObjectRequests>(io_, kNode, om_.get(), &tasks_, &alive_, gcs_.get(), &clients_,
                                                 /*copy_progress_ms=*/5000);
    requests_->AddRoutes(router_);
    requests_->ClientRegistered(client_->client_id);  // (as registration does: its objects have a known creator)
  }
  void TearDown() override {
    requests_->Stop();
    ServiceTest::TearDown();
  }
  rpc::GetObjects Get(const std::vector<std::string>& ids, int64_t timeout_ms) {
    rpc::GetObjects m;
    for (const auto& id : ids) m.add_object_ids(id);
    m.set_timeout_ms(timeout_ms);
    return m;
  }
  void PutInline(const std::string& id, const std::string& data) {
    rpc::PutInline m;
    m.set_object_id(id);
    m.set_data(data);
    m.set_hold(true);
    Send(rpc::PUT_INLINE, 0, m);
  }

  testing::RecordingObjectTasks tasks_;
  testing::AllAlive alive_;
  std::unique_ptr<ObjectRequests> requests_;
};

TEST_F(ObjectRequestsTest, AGetWaitsForItsObjectAndAnswersItsValue) {
  const std::string id = ObjectOf(client_->client_id, 1);
  Send(rpc::GET_OBJECTS, 7, Get({id}, -1));
  FrameHeader h;
  std::string body;
  EXPECT_FALSE(Next(&h, &body, 200)) << "answered before the object was made";
  PutInline(id, "the value");
  auto r = Reply<rpc::GetObjectsReply>(rpc::GET_OBJECTS, 7);
  ASSERT_EQ(r.objects_size(), 1);
  EXPECT_EQ(r.objects(0).object_id(), id);
  EXPECT_EQ(r.objects(0).state(), rpc::OBJ_INLINE);
  EXPECT_EQ(r.objects(0).data(), "the value");
}

TEST_F(ObjectRequestsTest, AGetOfAnObjectNoProcessMadeFailsAtOnceNamingIt) {
  const std::string id = ObjectOf(std::string(kClientIdSize, 'z'), 1);  // a creator the GCS never heard of
  Send(rpc::GET_OBJECTS, 8, Get({id}, -1));
  auto r = Reply<rpc::GetObjectsReply>(rpc::GET_OBJECTS, 8);
  ASSERT_EQ(r.objects_size(), 1);
  EXPECT_EQ(r.objects(0).state(), rpc::OBJ_LOST);
  EXPECT_EQ(r.objects(0).error_code(), static_cast<int>(StatusCode::kNotFound));
  EXPECT_NE(r.objects(0).error().find(ToHex(id)), std::string::npos) << r.objects(0).error();
}

TEST_F(ObjectRequestsTest, AGetPastItsDeadlineAnswersWhatIsThereAndPendingForTheRest) {
  const std::string here = ObjectOf(client_->client_id, 1), later = ObjectOf(client_->client_id, 2);
  PutInline(here, "here");
  Send(rpc::GET_OBJECTS, 9, Get({here, later}, 50));
  auto r = Reply<rpc::GetObjectsReply>(rpc::GET_OBJECTS, 9);
  ASSERT_EQ(r.objects_size(), 2);
  EXPECT_EQ(r.objects(0).state(), rpc::OBJ_INLINE);
  EXPECT_EQ(r.objects(1).state(), rpc::OBJ_PENDING);
}

TEST_F(ObjectRequestsTest, AGetOfSeveralEndsAtTheFirstFailureWithPendingForTheRest) {
  const std::string later = ObjectOf(client_->client_id, 1), failed = ObjectOf(client_->client_id, 2);
  const std::string more = ObjectOf(client_->client_id, 3);
  std::string error(64, '\0');  // (a task's error: the value header says so)
  const uint32_t head[2] = {value_format::kMagic, value_format::kKindError};
  std::memcpy(error.data(), head, sizeof(head));
  Send(rpc::GET_OBJECTS, 12, Get({later, failed}, -1));
  FrameHeader h;
  std::string body;
  EXPECT_FALSE(Next(&h, &body, 200)) << "answered before anything was made";
  PutInline(failed, error);
  auto r = Reply<rpc::GetObjectsReply>(rpc::GET_OBJECTS, 12);
  ASSERT_EQ(r.objects_size(), 2);
  EXPECT_EQ(r.objects(0).state(), rpc::OBJ_PENDING);
  EXPECT_EQ(r.objects(1).state(), rpc::OBJ_INLINE);
  EXPECT_EQ(r.objects(1).data(), error);
  // A failure there already ends the next at once; a value that is not an error does not.
  Send(rpc::GET_OBJECTS, 13, Get({more, failed}, -1));
  EXPECT_EQ(Reply<rpc::GetObjectsReply>(rpc::GET_OBJECTS, 13).objects(0).state(), rpc::OBJ_PENDING);
  PutInline(ObjectOf(client_->client_id, 4), "fine");
  Send(rpc::GET_OBJECTS, 14, Get({more, ObjectOf(client_->client_id, 4)}, -1));
  EXPECT_FALSE(Next(&h, &body, 200)) << "a get of a value and a pending one answered early";
  PutInline(more, "more");
  EXPECT_EQ(Reply<rpc::GetObjectsReply>(rpc::GET_OBJECTS, 14).objects(0).data(), "more");
}

TEST_F(ObjectRequestsTest, AWaitAnswersOnceEnoughAreReady) {
  const std::string a = ObjectOf(client_->client_id, 1), b = ObjectOf(client_->client_id, 2);
  rpc::WaitObjects w;
  w.add_object_ids(a);
  w.add_object_ids(b);
  w.set_num_returns(1);
  w.set_timeout_ms(-1);
  Send(rpc::WAIT_OBJECTS, 10, w);
  PutInline(b, "b");
  auto r = Reply<rpc::WaitObjectsReply>(rpc::WAIT_OBJECTS, 10);
  ASSERT_EQ(r.ready_ids_size(), 1);
  EXPECT_EQ(r.ready_ids(0), b);
}

TEST_F(ObjectRequestsTest, AWorkerBlockedInAGetLendsItsResourcesBackUntilItReturns) {
  Worker w;
  w.pid = 31;
  client_->worker = &w;
  client_->is_worker = true;
  const std::string id = ObjectOf(client_->client_id, 1);
  Send(rpc::GET_OBJECTS, 11, Get({id}, -1));
  EXPECT_EQ(tasks_.events, std::vector<std::string>{"blocked 31"});
  PutInline(id, "v");
  Reply<rpc::GetObjectsReply>(rpc::GET_OBJECTS, 11);
  EXPECT_EQ(tasks_.events, (std::vector<std::string>{"blocked 31", "unblocked 31"}));
  client_->worker = nullptr;
}

TEST_F(ObjectRequestsTest, AClientsExitLetsGoOfWhatItHeld) {
  const std::string id = ObjectOf(client_->client_id, 1);
  PutInline(id, "held by the client only");
  ASSERT_TRUE(RunUntil([&] { return table().IsReady(id); }));
  requests_->OnClientGone(*client_, "driver process 4242 exited");
  EXPECT_TRUE(client_->holds.empty());
  EXPECT_TRUE(RunUntil([&] { return !table().Contains(id); })) << "its only reference went with the client";
}

TEST_F(ObjectRequestsTest, AMalformedMessageIsRefusedAndClosesTheConnection) {
  FrameHeader h;
  h.type = rpc::GET_OBJECTS;
  h.request_id = 12;
  std::string junk = "\xff\xff\xff\xff not a protobuf";
  h.length = static_cast<uint32_t>(junk.size());
  router_.ClientFrame(client_, h, junk.data(), junk.size());
  EXPECT_TRUE(RunUntil([&] { return client_->conn->closed(); }));
}

}  // namespace
}  // namespace phalanx::scheduler
