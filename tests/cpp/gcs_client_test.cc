// GcsClient against a real redis-server started on a free port.
#include "gcs/gcs_client.h"

#include <gtest/gtest.h>

#include "tests/cpp/test_util.h"

namespace phalanx {

class GcsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<testing::RedisServer>();
    client_ = std::make_unique<RedisClient>(io_, "127.0.0.1", redis_->port());
    ASSERT_TRUE(client_->Connect(2000).ok());
    gcs_ = std::make_unique<GcsClient>(client_.get());
  }
  // Runs the loop until `done` or 5 s.
  void RunUntil(const std::function<bool()>& done) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done() && std::chrono::steady_clock::now() < until) io_.run_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(done());
  }
  boost::asio::io_context io_;
  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<RedisClient> client_;
  std::unique_ptr<GcsClient> gcs_;
};

TEST_F(GcsClientTest, NodeTableRoundTripAndAnnouncement) {
  std::vector<rpc::NodeInfo> announced;
  gcs_->SubscribeNodes([&](const rpc::NodeInfo& n) { announced.push_back(n); });
  io_.run_for(std::chrono::milliseconds(50));  // subscription in place
  rpc::NodeInfo n;
  n.set_node_id("node-1");
  n.set_alive(true);
  (*n.mutable_resources_total())["CPU"] = 4;
  gcs_->RegisterNode(n);
  std::vector<rpc::NodeInfo> nodes;
  bool got = false;
  gcs_->GetAllNodes([&](Result<std::vector<rpc::NodeInfo>> r) {
    ASSERT_TRUE(r.ok());
    nodes = r.value();
    got = true;
  });
  RunUntil([&] { return got && !announced.empty(); });
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].resources_total().at("CPU"), 4);
  EXPECT_EQ(announced[0].node_id(), "node-1");
}

TEST_F(GcsClientTest, TaskRecordsWrittenInBatchesAndDeleted) {
  std::vector<rpc::TaskRecord> recs(3);
  for (int i = 0; i < 3; ++i) {
    recs[i].set_task_id(std::string(16, static_cast<char>('a' + i)));
    recs[i].set_function_name("f" + std::to_string(i));
    recs[i].set_state(rpc::TASK_FINISHED);
  }
  gcs_->PutTaskRecords(recs);
  gcs_->DeleteTaskRecords({recs[0].task_id()});
  int done = 0;
  Status first, second;
  std::string name;
  gcs_->GetTaskRecord(recs[0].task_id(), [&](Result<rpc::TaskRecord> r) { first = r.status(); ++done; });
  gcs_->GetTaskRecord(recs[2].task_id(), [&](Result<rpc::TaskRecord> r) {
    second = r.status();
    if (r.ok()) name = r.value().function_name();
    ++done;
  });
  RunUntil([&] { return done == 2; });
  EXPECT_EQ(first.code(), StatusCode::kNotFound);
  EXPECT_TRUE(second.ok());
  EXPECT_EQ(name, "f2");
}

TEST_F(GcsClientTest, ObjectDirectoryAnnouncesLocationsAndForgetsFreedObjects) {
  std::string oid(20, 'o');
  std::vector<rpc::ObjectDirectoryEntry> seen;
  gcs_->SubscribeObjectLocations(oid, [&](const rpc::ObjectDirectoryEntry& e) { seen.push_back(e); });
  io_.run_for(std::chrono::milliseconds(50));
  rpc::ObjectLocation loc;
  loc.set_node_id("node-1");
  loc.set_complete(false);
  loc.set_bytes_present(512);
  gcs_->AddObjectLocation(oid, 1024, loc);
  RunUntil([&] { return !seen.empty(); });
  ASSERT_EQ(seen[0].locations_size(), 1);
  EXPECT_EQ(seen[0].size(), 1024u);
  EXPECT_EQ(seen[0].locations(0).bytes_present(), 512u);
  gcs_->RemoveObjectLocation(oid, "node-1");
  bool got = false;
  rpc::ObjectDirectoryEntry after;
  gcs_->GetObjectLocations(oid, [&](Result<rpc::ObjectDirectoryEntry> r) {
    after = r.value();
    got = true;
  });
  RunUntil([&] { return got; });
  EXPECT_EQ(after.locations_size(), 0);
}

TEST_F(GcsClientTest, UnreachableServerIsNamedAndDeathIsReported) {
  boost::asio::io_context io;
  RedisClient nowhere(io, "127.0.0.1", testing::FreePort());
  Status st = nowhere.Connect(500);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("redis-server"), std::string::npos);

  Status lost;
  client_->SetDisconnectCallback([&](const Status& why) { lost = why; });
  Status reply_status;
  bool replied = false;
  redis_->Kill();
  client_->Command({"PING"}, [&](Result<RedisReply> r) {
    reply_status = r.status();
    replied = true;
  });
  RunUntil([&] { return replied && !lost.ok(); });
  EXPECT_EQ(reply_status.code(), StatusCode::kUnavailable);
  EXPECT_NE(lost.message().find("redis-server"), std::string::npos);
}

}  // namespace phalanx
