// CollectiveService alone (tests/cpp/service_fixture.h): a reduce of this
// node's objects makes its result, held by the client that asked; a reduce
// with a deadline names the inputs that never came; a rank of a static
// group that exits is news to a rank waiting for it, a client that never
// met anyone is not; a malformed reduce closes the connection.
#include "scheduler/collective_service.h"

#include "array_values.h"
#include "core/status_proto.h"
#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class CollectiveServiceTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    service_ = std::make_unique<CollectiveService>(io_, kNode, om_.get(), /*inline_threshold=*/0, &peers_, gcs_.get());
    service_->AddRoutes(router_);
  }
  void TearDown() override {
    service_->Stop("test over");
    service_.reset();
    ServiceTest::TearDown();
  }
  void Input(const std::string& id, const std::vector<float>& v) {
    table().AddRef(id);
    collectives::testing::SealArray(table(), om_->store(), id, v, collectives::DType::kFloat32);
  }
  rpc::ReduceObjects Reduce(const std::string& out, const std::vector<std::string>& inputs, int64_t timeout_ms = 0) {
    rpc::ReduceObjects m;
    m.set_out_id(out);
    for (const auto& id : inputs) m.add_input_ids(id);
    m.set_op("sum");
    m.set_timeout_ms(timeout_ms);
    return m;
  }
  rpc::Rendezvous Meet(int rank, const std::vector<std::string>& clients) {
    rpc::Rendezvous m;
    m.set_key("group-under-test");
    m.set_rank(rank);
    m.set_world(static_cast<int>(clients.size()));
    m.set_payload("rank " + std::to_string(rank));
    m.set_timeout_ms(-1);
    for (const auto& c : clients) m.add_rank_clients(c);
    return m;
  }

  std::unique_ptr<CollectiveService> service_;
};

TEST_F(CollectiveServiceTest, AReduceOfThisNodesObjectsMakesItsResultHeldByTheClient) {
  const std::string a = ObjectOf(client_->client_id, 1), b = ObjectOf(client_->client_id, 2);
  const std::string out = ObjectOf(client_->client_id, 3);
  Input(a, {1, 2, 3});
  Input(b, {10, 20, 30});
  Send(rpc::REDUCE_OBJECTS, 0, Reduce(out, {a, b}));
  ASSERT_TRUE(RunUntil([&] { return table().IsReady(out); }));
  EXPECT_EQ(collectives::testing::ReadArray<float>(table(), om_->store(), out), (std::vector<float>{11, 22, 33}));
  EXPECT_TRUE(client_->holds.count(out)) << "the client holds its result until it lets go";
}

TEST_F(CollectiveServiceTest, AReduceWithADeadlineNamesTheInputsThatNeverCame) {
  const std::string a = ObjectOf(client_->client_id, 1), never = ObjectOf(client_->client_id, 2);
  const std::string out = ObjectOf(client_->client_id, 3);
  Input(a, {1, 2, 3});
  table().AddRef(never);  // pending, and nothing will make it
  Send(rpc::REDUCE_OBJECTS, 0, Reduce(out, {a, never}, /*timeout_ms=*/100));
  ASSERT_TRUE(RunUntil([&] { return table().IsReady(out); }));
  rpc::ObjectValue v;
  table().Describe(out, &v, false);
  ASSERT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_NE(v.error().find(ToHex(never)), std::string::npos) << v.error();
}

TEST_F(CollectiveServiceTest, ARankThatExitsIsNewsToARankWaitingForIt) {
  int far = -1;
  auto other = Connect(std::string(kClientIdSize, 'o'), &far);
  const std::vector<std::string> ranks = {other->client_id, client_->client_id};
  Send(rpc::RENDEZVOUS, 1, Meet(0, ranks), other);  // rank 0 arrives...
  Send(rpc::RENDEZVOUS, 2, Meet(1, ranks));
  auto r = Reply<rpc::RendezvousReply>(rpc::RENDEZVOUS, 2);  // ... both did: the group met
  ASSERT_TRUE(FromProto(r.status()).ok()) << FromProto(r.status()).ToString();
  EXPECT_EQ(r.payloads_size(), 2);
  // A second meeting: rank 0 exits instead of coming.
  rpc::Rendezvous again = Meet(1, ranks);
  again.set_key("group-under-test/2");
  Send(rpc::RENDEZVOUS, 3, again);
  ASSERT_TRUE(other->met);
  service_->OnClientGone(*other, "worker process 9 on node 6e6f64652d756e exited (killed by signal 9)");
  r = Reply<rpc::RendezvousReply>(rpc::RENDEZVOUS, 3);
  Status st = FromProto(r.status());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("worker process 9"), std::string::npos) << st.ToString();
}

TEST_F(CollectiveServiceTest, AClientThatNeverMetAnyoneIsNoNews) {
  int far = -1;
  auto other = Connect(std::string(kClientIdSize, 'o'), &far);
  Send(rpc::RENDEZVOUS, 4, Meet(1, {other->client_id, client_->client_id}));
  ASSERT_FALSE(other->met);
  service_->OnClientGone(*other, "driver process 10 exited");
  FrameHeader h;
  std::string body;
  EXPECT_FALSE(Next(&h, &body, 300)) << "the meeting still waits for rank 0";
}

TEST_F(CollectiveServiceTest, AMalformedReduceClosesTheConnection) {
  rpc::ReduceObjects m = Reduce("not an object id", {ObjectOf(client_->client_id, 1)});
  Send(rpc::REDUCE_OBJECTS, 0, m);
  EXPECT_TRUE(RunUntil([&] { return client_->conn->closed(); }));
}

}  // namespace
}  // namespace phalanx::scheduler
