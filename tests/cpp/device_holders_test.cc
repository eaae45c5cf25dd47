// DeviceHolders alone (tests/cpp/service_fixture.h): a client that says it
// keeps objects on its GPU is told when this node frees them, the ids freed
// in one turn together; every holder of an object is told; an object freed
// before its holder spoke is told at once; a holder's exit forgets its
// records; ids of the wrong size close the connection.
#include "scheduler/device_holders.h"

#include "service_fixture.h"

namespace phalanx::scheduler {
namespace {

class DeviceHoldersTest : public testing::ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    holders_ = std::make_unique<DeviceHolders>(io_, &table(), &clients_);
    holders_->AddRoutes(router_);
  }
  void Held(const std::vector<std::string>& ids, std::shared_ptr<Client> c = nullptr) {
    rpc::ObjectIds m;
    for (const auto& id : ids) m.add_object_ids(id);
    Send(rpc::DEVICE_HELD, 0, m, std::move(c));
  }
  // The ids of the next DEVICE_OBJECTS_FREED on `fd` (empty if none came in `timeout_ms`).
  std::vector<std::string> Freed(int fd = -1, int timeout_ms = 10000) {
    FrameHeader h;
    std::string body;
    if (!Next(&h, &body, timeout_ms, fd)) return {};
    EXPECT_EQ(h.type, rpc::DEVICE_OBJECTS_FREED);
    rpc::ObjectIds m;
    EXPECT_TRUE(m.ParseFromString(body));
    return {m.object_ids().begin(), m.object_ids().end()};
  }

  std::unique_ptr<DeviceHolders> holders_;
};

TEST_F(DeviceHoldersTest, TheHolderIsToldOfTheObjectsFreedInOneTurnTogether) {
  std::string a = ObjectOf(client_->client_id, 1), b = ObjectOf(client_->client_id, 2),
              c = ObjectOf(client_->client_id, 3);
  Held({a, b, c});
  EXPECT_EQ(holders_->num_objects(), 3u);
  holders_->OnObjectFreed(a);
  holders_->OnObjectFreed(b);
  EXPECT_EQ(Freed(), (std::vector<std::string>{a, b}));
  EXPECT_EQ(holders_->num_objects(), 1u);
  holders_->OnObjectFreed(ObjectOf(client_->client_id, 9));  // nobody keeps it on a GPU: nothing is said
  holders_->OnObjectFreed(a);                                // told once only
  EXPECT_TRUE(Freed(-1, 200).empty());
  holders_->OnObjectFreed(c);
  EXPECT_EQ(Freed(), (std::vector<std::string>{c}));
  EXPECT_EQ(holders_->num_objects(), 0u);
}

TEST_F(DeviceHoldersTest, EveryHolderOfAnObjectIsTold) {
  int fd2 = -1;
  auto second = Connect(std::string(kClientIdSize, 'd'), &fd2);
  std::string a = ObjectOf(client_->client_id, 1);
  Held({a});
  Held({a}, second);  // (a task run twice: each run's process kept its own)
  holders_->OnObjectFreed(a);
  EXPECT_EQ(Freed(), (std::vector<std::string>{a}));
  EXPECT_EQ(Freed(fd2), (std::vector<std::string>{a}));
}

TEST_F(DeviceHoldersTest, AnObjectFreedBeforeItsHolderSpokeIsToldAtOnce) {
  std::string a = ObjectOf(client_->client_id, 1);
  table().AddRef(a);
  table().PutInline(a, "x", {});
  table().RemoveRef(a);
  ASSERT_TRUE(table().WasFreed(a));
  Held({a});
  EXPECT_EQ(Freed(), (std::vector<std::string>{a}));
  EXPECT_EQ(holders_->num_objects(), 0u);
}

TEST_F(DeviceHoldersTest, AHoldersExitForgetsItsRecords) {
  int fd2 = -1;
  auto second = Connect(std::string(kClientIdSize, 'd'), &fd2);
  std::string a = ObjectOf(client_->client_id, 1), b = ObjectOf(client_->client_id, 2);
  Held({a, b});
  Held({a}, second);
  holders_->OnClientGone(*client_, "worker process 4242 exited");
  EXPECT_EQ(holders_->num_objects(), 1u);  // a, still kept by the second
  holders_->OnObjectFreed(a);
  holders_->OnObjectFreed(b);
  EXPECT_EQ(Freed(fd2), (std::vector<std::string>{a}));
  EXPECT_TRUE(Freed(-1, 200).empty());
  EXPECT_EQ(holders_->num_objects(), 0u);
}

TEST_F(DeviceHoldersTest, IdsOfTheWrongSizeCloseTheConnection) {
  Held({"short"});
  EXPECT_TRUE(RunUntil([&] { return client_->conn->closed(); }));
  EXPECT_EQ(holders_->num_objects(), 0u);
}

}  // namespace
}  // namespace phalanx::scheduler
