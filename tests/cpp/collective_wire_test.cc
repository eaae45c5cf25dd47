// The CollectiveWire alone (collectives/collective_wire.h), with fake peers
// that record what is sent and answer as told: the ReduceChain sends each
// message to the right node with its timeout (or run it here, for this
// node), replies become the Status the chain sees, and messages from peers
// are checked before anything acts on them.
#include "collectives/collective_wire.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "array_values.h"
#include "core/status_proto.h"
#include "core/trace.h"
#include "objectstore/object_transfer.h"

namespace phalanx::collectives {
namespace {

struct Sent {
  std::string node;
  rpc::MessageType type;
  std::string body;
  int64_t timeout_ms;
};

// The other raylets (a PeerChannel) and the holds for them (a RefLender), recorded.
class FakePeers : public PeerChannel, public objectstore::RefLender {
 public:
  void Call(const std::string& node, rpc::MessageType type, const google::protobuf::Message& m, int64_t timeout_ms,
            std::function<void(Result<std::string>)> done) override {
    sent.push_back({node, type, m.SerializeAsString(), timeout_ms});
    if (done) done(answer);
  }
  void Release(const std::string& node, const std::vector<std::string>& ids) override {
    for (const auto& id : ids) released.emplace_back(node, id);
  }
  void Lend(const std::string& node, const std::string& id) override { held.emplace_back(node, id); }

  Result<std::string> answer = ToProto(Status::OK()).SerializeAsString();
  std::vector<Sent> sent;
  std::vector<std::pair<std::string, std::string>> released, held;
};

class CollectiveWireTest : public ::testing::Test {
 protected:
  CollectiveWireTest() {
    auto region = objectstore::ShmRegion::Create(1 << 20, "collective-wire-test");
    EXPECT_TRUE(region.ok());
    store_ = std::make_unique<objectstore::ObjectStore>(std::move(region).value());
    table_ = std::make_unique<objectstore::ObjectTable>(store_.get());
    transfer_ = std::make_unique<objectstore::ObjectTransfer>(table_.get(), store_.get(), nullptr);
    steps_ = std::make_unique<ReduceSteps>(io_, table_.get(), store_.get(), transfer_.get(), "self");
    wire_ = std::make_unique<CollectiveWire>("self", steps_.get(), table_.get(), &peers_, &peers_, transfer_.get(),
                                             1 << 18);
  }

  Status Handle(rpc::MessageType type, const std::string& body) {
    Status got = Status::Internal("no reply");
    wire_->Handle(type, body, [&](const Status& st) { got = st; });
    return got;
  }

  static std::string Id(char c) { return std::string(20, c); }

  FakePeers peers_;
  boost::asio::io_context io_;
  std::unique_ptr<objectstore::ObjectStore> store_;
  std::unique_ptr<objectstore::ObjectTable> table_;
  std::unique_ptr<objectstore::ObjectTransfer> transfer_;
  std::unique_ptr<ReduceSteps> steps_;
  std::unique_ptr<CollectiveWire> wire_;
};

TEST_F(CollectiveWireTest, MalformedMessagesAreRefusedAndChangeNothing) {
  table_->AddRef(Id('a'));
  const std::string garbage = "\xff\xff\xff\xff not a message";
  for (auto type : {rpc::REDUCE_STEP, rpc::ASSEMBLE_SLICES, rpc::LOSE_OBJECTS, rpc::DROP_PARTIALS}) {
    EXPECT_EQ(Handle(type, garbage).code(), StatusCode::kInvalidArgument) << type;
  }
  rpc::LostObjects short_id;  // one good id and one of three bytes: refused whole
  short_id.add_object_ids(Id('a'));
  short_id.add_object_ids("abc");
  EXPECT_EQ(Handle(rpc::LOSE_OBJECTS, short_id.SerializeAsString()).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(table_->IsReady(Id('a'))) << "nothing was marked lost";
  rpc::ReduceStep step;
  step.set_out_id("short");
  EXPECT_EQ(Handle(rpc::REDUCE_STEP, step.SerializeAsString()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Handle(rpc::FORWARD_TASK, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(steps_->num_steps(), 0u);
  EXPECT_TRUE(peers_.sent.empty());
}

TEST_F(CollectiveWireTest, LostObjectsFailOnlyWhatThisNodeStillWaitsFor) {
  table_->AddRef(Id('a'));
  table_->AddRef(Id('c'));
  rpc::LostObjects m;
  m.add_object_ids(Id('a'));
  m.add_object_ids(Id('b'));  // unknown here: not created by the message
  m.set_code(static_cast<int>(StatusCode::kWorkerDied));
  m.set_why("rank 2's worker died");
  EXPECT_TRUE(Handle(rpc::LOSE_OBJECTS, m.SerializeAsString()).ok());
  rpc::ObjectValue v;
  table_->Describe(Id('a'), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_EQ(v.error(), "rank 2's worker died");
  EXPECT_FALSE(table_->Contains(Id('b')));
  rpc::LostObjects odd;  // a code this node does not know becomes ObjectLost
  odd.add_object_ids(Id('c'));
  odd.set_code(9999);
  odd.set_why("from a newer node");
  EXPECT_TRUE(Handle(rpc::LOSE_OBJECTS, odd.SerializeAsString()).ok());
  table_->Describe(Id('c'), &v, false);
  EXPECT_EQ(v.state(), rpc::OBJ_LOST);
  EXPECT_EQ(v.error_code(), static_cast<int>(StatusCode::kObjectLost));
}

TEST_F(CollectiveWireTest, TheChainSendsToOtherNodesAndRunsThisNodesHere) {
  ReduceChain& chain = *wire_;
  EXPECT_EQ(chain.self(), "self");
  EXPECT_EQ(chain.chunk_bytes(), 1u << 18);
  chain.Drop("self", {Id('p')});  // this node: its own steps, nothing sent
  EXPECT_TRUE(peers_.sent.empty());
  chain.Drop("b", {Id('p'), Id('q')});
  ASSERT_EQ(peers_.sent.size(), 1u);
  EXPECT_EQ(peers_.sent[0].node, "b");
  EXPECT_EQ(peers_.sent[0].type, rpc::DROP_PARTIALS);
  EXPECT_EQ(peers_.sent[0].timeout_ms, CollectiveWire::kDropTimeoutMs);
  rpc::ObjectIds dropped;
  ASSERT_TRUE(dropped.ParseFromString(peers_.sent[0].body));
  EXPECT_EQ(dropped.object_ids_size(), 2);
  chain.Lose("c", {Id('r')}, StatusCode::kCollectiveFailed, "ring broke");
  rpc::LostObjects lost;
  ASSERT_TRUE(lost.ParseFromString(peers_.sent.back().body));
  EXPECT_EQ(peers_.sent.back().type, rpc::LOSE_OBJECTS);
  EXPECT_EQ(lost.code(), static_cast<int>(StatusCode::kCollectiveFailed));
  EXPECT_EQ(lost.why(), "ring broke");
  chain.Release("d", {Id('s')});
  EXPECT_EQ(peers_.released, (std::vector<std::pair<std::string, std::string>>{{"d", Id('s')}}));
  auto link = transfer_->LinkTo("b");  // (the transfers' figures: the defaults until measured)
  EXPECT_EQ(chain.Link("b"), std::make_pair(link.bytes_per_s, link.rtt_s));
}

TEST_F(CollectiveWireTest, ProbesAskWithAnEmptyDropAndSayWhetherTheNodeAnswered) {
  ReduceChain& chain = *wire_;
  std::vector<bool> alive;
  chain.Probe("self", [&](bool a) { alive.push_back(a); });
  EXPECT_TRUE(peers_.sent.empty());
  chain.Probe("b", [&](bool a) { alive.push_back(a); });
  EXPECT_EQ(peers_.sent.back().type, rpc::DROP_PARTIALS);
  EXPECT_EQ(peers_.sent.back().timeout_ms, CollectiveWire::kProbeTimeoutMs);
  EXPECT_TRUE(peers_.sent.back().body.empty());
  peers_.answer = Status::Unavailable("node b timed out");
  chain.Probe("b", [&](bool a) { alive.push_back(a); });
  EXPECT_EQ(alive, (std::vector<bool>{true, true, false}));
}

TEST_F(CollectiveWireTest, AStepsReplyIsTheStatusTheChainSees) {
  ReduceChain& chain = *wire_;
  rpc::ReduceStep m;
  m.set_out_id(Id('o'));
  std::vector<Status> started;
  peers_.answer = ToProto(Status(StatusCode::kCollectiveFailed, "input 1 is not in the store")).SerializeAsString();
  chain.SendStep("b", m, [&](const Status& st) { started.push_back(st); });
  EXPECT_EQ(peers_.sent.back().type, rpc::REDUCE_STEP);
  EXPECT_EQ(peers_.sent.back().timeout_ms, CollectiveWire::kStepTimeoutMs);
  peers_.answer = std::string("\xff\xff garbage");
  chain.SendStep("b", m, [&](const Status& st) { started.push_back(st); });
  peers_.answer = Status::Unavailable("node b is not alive");
  chain.SendStep("b", m, [&](const Status& st) { started.push_back(st); });
  ASSERT_EQ(started.size(), 3u);
  EXPECT_EQ(started[0].code(), StatusCode::kCollectiveFailed);
  EXPECT_EQ(started[0].message(), "input 1 is not in the store");
  EXPECT_NE(started[1].message().find("malformed reply"), std::string::npos);
  EXPECT_EQ(started[2].message(), "node b is not alive");
  rpc::AssembleSlices a;
  a.set_out_id(Id('x'));
  peers_.answer = ToProto(Status::OK()).SerializeAsString();
  chain.Assemble("c", a, [&](const Status& st) { started.push_back(st); });
  EXPECT_EQ(peers_.sent.back().type, rpc::ASSEMBLE_SLICES);
  EXPECT_EQ(peers_.sent.back().timeout_ms, CollectiveWire::kAssembleTimeoutMs);
  EXPECT_TRUE(started.back().ok());
}

TEST_F(CollectiveWireTest, AStepWhosePrevThisNodeNoLongerHasFailsAtOnce) {
  // The caller placed the step here to read prev here, but this node let go
  // of prev meanwhile (copied to the caller's node): nothing would make it
  // here, so the step fails at once instead of waiting until the reduce's timeout.
  rpc::ReduceStep m;
  m.set_out_id(Id('o'));
  m.set_prev_id(Id('p'));
  m.set_prev_node("self");
  m.set_prev_name("input 0 (ObjectRef(7070))");
  m.set_input_id(Id('i'));
  m.set_input_name("input 1");
  m.set_op("sum");
  std::vector<Status> started;
  steps_->Run(m, [&](const Status& st) { started.push_back(st); }, [&](const Status& st) { started.push_back(st); });
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].code(), StatusCode::kObjectLost);
  EXPECT_EQ(started[0].message(), "input 0 (ObjectRef(7070)) is no longer on node 73656c66");
  EXPECT_EQ(steps_->num_steps(), 0u);
}

TEST_F(CollectiveWireTest, AStepStillRunningIsInTheTimelineInFlight) {
  // (the timeline's records need this process's ring open: tracing on)
  char tmpl[] = "/tmp/phalanx-step-trace.XXXXXX";
  std::string session = ::mkdtemp(tmpl);
  trace::OpenProcessRing(session, std::string(16, 's'), "raylet");
  ASSERT_NE(trace::ProcessRing(), nullptr);
  std::vector<float> ones(1000, 1.0f);
  table_->AddRef(Id('i'));
  testing::SealArray(*table_, *store_, Id('i'), ones, DType::kFloat32);
  rpc::ObjectValue v;
  table_->Describe(Id('i'), &v, false);
  ASSERT_TRUE(transfer_->Produce(Id('p'), v.size()).ok());  // prev: being made here (by an earlier link)
  rpc::ReduceStep m;
  m.set_out_id(Id('o'));
  m.set_prev_id(Id('p'));
  m.set_prev_node("self");
  m.set_input_id(Id('i'));
  m.set_op("sum");
  Status started = Status::Internal("not started");
  steps_->Run(m, [&](const Status& st) { started = st; }, [](const Status&) {});
  ASSERT_TRUE(started.ok()) << started.ToString();
  std::string live;
  steps_->TraceInFlight(&live, 10);
  ASSERT_EQ(live.size(), sizeof(trace::Record));
  trace::Record r;
  std::memcpy(static_cast<void*>(&r), live.data(), sizeof(r));
  EXPECT_EQ(r.kind, trace::kReduceStep);
  EXPECT_EQ(r.flags, trace::kInFlight);
  EXPECT_EQ(std::string(r.id, 20), Id('o'));
  EXPECT_EQ(std::string(r.name), "sum with one input");
  EXPECT_EQ(r.a, v.size());
  EXPECT_EQ(r.b, 1u);
  steps_->Drop({Id('o')}, "the test is over");
  std::string none;
  steps_->TraceInFlight(&none, 10);
  EXPECT_TRUE(none.empty()) << "a step that ended is not in flight";
  trace::CloseProcessRing();
  std::system(("rm -rf " + session + " " + trace::TraceDir(session)).c_str());
}

}  // namespace
}  // namespace phalanx::collectives
