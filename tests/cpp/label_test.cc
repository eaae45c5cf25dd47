// Node labels against label selectors (scheduler/label_match.h), a cluster
// view's choice of node by them (ClusterView::PlaceByLabels) and the wait then
// failure while no node has them (scheduler/label_placement.h).
#include <gtest/gtest.h>

#include "core/ids.h"
#include "scheduler/cluster_view.h"
#include "scheduler/label_match.h"
#include "scheduler/label_placement.h"

namespace phalanx::scheduler {
namespace {

rpc::LabelConstraint Constraint(const std::string& key, rpc::LabelConstraint::Op op,
                                std::vector<std::string> values = {}) {
  rpc::LabelConstraint c;
  c.set_key(key);
  c.set_op(op);
  for (auto& v : values) c.add_values(v);
  return c;
}

LabelConstraints Selector(std::vector<rpc::LabelConstraint> cs) {
  LabelConstraints out;
  for (auto& c : cs) *out.Add() = c;
  return out;
}

NodeLabels Labels(std::map<std::string, std::string> kv) {
  NodeLabels out;
  for (auto& [k, v] : kv) out[k] = v;
  return out;
}

ResourceSet Cpus(double n) {
  ResourceSet r;
  r.Set("CPU", n);
  return r;
}

rpc::NodeInfo Node(const std::string& id, double total, double free, std::map<std::string, std::string> labels) {
  rpc::NodeInfo n;
  n.set_node_id(id);
  n.set_alive(true);
  (*n.mutable_resources_total())["CPU"] = total;
  (*n.mutable_resources_available())["CPU"] = free;
  for (auto& [k, v] : labels) (*n.mutable_labels())[k] = v;
  return n;
}

TEST(LabelsMatch, EachOperatorAsRayHasIt) {
  NodeLabels gpu = Labels({{"zone", "us-1"}, {"gpu", "a100"}});
  NodeLabels bare = Labels({{"zone", "us-2"}});
  auto in = Selector({Constraint("zone", rpc::LabelConstraint::IN, {"us-1", "us-3"})});
  EXPECT_TRUE(LabelsMatch(gpu, in));
  EXPECT_FALSE(LabelsMatch(bare, in));
  auto not_in = Selector({Constraint("gpu", rpc::LabelConstraint::NOT_IN, {"a100"})});
  EXPECT_FALSE(LabelsMatch(gpu, not_in));
  EXPECT_TRUE(LabelsMatch(bare, not_in));  // (absent counts as not in)
  auto exists = Selector({Constraint("gpu", rpc::LabelConstraint::EXISTS)});
  EXPECT_TRUE(LabelsMatch(gpu, exists));
  EXPECT_FALSE(LabelsMatch(bare, exists));
  auto missing = Selector({Constraint("gpu", rpc::LabelConstraint::DOES_NOT_EXIST)});
  EXPECT_FALSE(LabelsMatch(gpu, missing));
  EXPECT_TRUE(LabelsMatch(bare, missing));
  EXPECT_TRUE(LabelsMatch(bare, Selector({})));  // no constraint: any node
  // Every constraint must hold.
  EXPECT_FALSE(LabelsMatch(gpu, Selector({Constraint("zone", rpc::LabelConstraint::IN, {"us-1"}),
                                          Constraint("gpu", rpc::LabelConstraint::DOES_NOT_EXIST)})));
}

TEST(LabelsMatch, DescribeNamesEveryConstraint) {
  auto s = Selector({Constraint("zone", rpc::LabelConstraint::IN, {"a", "b"}),
                     Constraint("gpu", rpc::LabelConstraint::NOT_IN, {"x"}),
                     Constraint("ssd", rpc::LabelConstraint::EXISTS),
                     Constraint("spot", rpc::LabelConstraint::DOES_NOT_EXIST)});
  EXPECT_EQ(DescribeSelector(s), "{zone in (a, b), gpu not in (x), ssd exists, spot does not exist}");
}

TEST(LabelsMatch, TheFirstSelectorSomeNodeMatchesApplies) {
  rpc::TaskSpec spec;
  *spec.mutable_label_selector() = Selector({Constraint("zone", rpc::LabelConstraint::IN, {"eu"})});
  auto* f = spec.add_label_fallbacks();
  *f->mutable_constraints() = Selector({Constraint("zone", rpc::LabelConstraint::IN, {"us"})});
  NodeLabels us = Labels({{"zone", "us"}});
  auto matches_us = [&](const LabelConstraints& s) { return LabelsMatch(us, s); };
  EXPECT_EQ(ApplicableSelector(spec, matches_us), &spec.label_fallbacks(0).constraints());
  auto matches_none = [](const LabelConstraints&) { return false; };
  EXPECT_EQ(ApplicableSelector(spec, matches_none), nullptr);
}

class ViewWithLabels : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = {Node("self", 2, 0, {{"zone", "us"}}), Node("eu-busy", 2, 0, {{"zone", "eu"}}),
              Node("eu-free", 2, 2, {{"zone", "eu"}}), Node("ap", 1, 1, {{"zone", "ap"}})};
    view_.Update(nodes_, {{ToHex("eu-busy"), "1:0"}, {ToHex("eu-free"), "1:0"}, {ToHex("ap"), "1:0"}}, 0);
  }
  rpc::TaskSpec Wants(const std::string& zone) {
    rpc::TaskSpec spec;
    *spec.mutable_label_selector() = Selector({Constraint("zone", rpc::LabelConstraint::IN, {zone})});
    return spec;
  }
  ClusterView view_{"self", 1500};
  std::vector<rpc::NodeInfo> nodes_;
};

TEST_F(ViewWithLabels, AMatchingNodeWithRoomNowIsTaken) {
  auto where = view_.PlaceByLabels(Wants("eu"), Cpus(1), Cpus(2), Cpus(0));
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where.value(), "eu-free");
}

TEST_F(ViewWithLabels, ThisNodeWhenItMatchesAndHasRoom) {
  auto where = view_.PlaceByLabels(Wants("us"), Cpus(1), Cpus(2), Cpus(2));
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where.value(), "");
}

TEST_F(ViewWithLabels, NoRoomAnywhereWaitsOnAMatchingNodeThatCouldHoldIt) {
  auto where = view_.PlaceByLabels(Wants("us"), Cpus(1), Cpus(2), Cpus(0));
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where.value(), "");  // this node has the labels and 2 CPUs in all: it waits here
}

TEST_F(ViewWithLabels, AFallbackIsUsedWhenTheSelectorHasNoRoom) {
  rpc::TaskSpec spec = Wants("us");
  *spec.add_label_fallbacks()->mutable_constraints() = Wants("ap").label_selector();
  auto where = view_.PlaceByLabels(spec, Cpus(1), Cpus(2), Cpus(0));
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where.value(), "ap");
}

TEST_F(ViewWithLabels, NoNodeWithTheLabelsNamesTheSelectorAndEveryNodesLabels) {
  auto where = view_.PlaceByLabels(Wants("mars"), Cpus(1), Cpus(2), Cpus(2));
  ASSERT_FALSE(where.ok());
  EXPECT_EQ(where.status().code(), StatusCode::kInfeasible);
  const std::string& why = where.status().message();
  EXPECT_NE(why.find("{zone in (mars)}"), std::string::npos) << why;
  EXPECT_NE(why.find("zone=ap"), std::string::npos) << why;
  EXPECT_NE(why.find("zone=us"), std::string::npos) << why;
  // Labels match but no node could ever hold the need: infeasible too.
  EXPECT_FALSE(view_.PlaceByLabels(Wants("ap"), Cpus(4), Cpus(2), Cpus(2)).ok());
}

class ScriptedNodes : public RemoteNodes {
 public:
  Result<std::string> answer = std::string("n1");
  std::string Spill(const rpc::TaskSpec&, const ResourceSet&) override { return ""; }
  bool SpillTo(const std::string&, const rpc::TaskSpec&) override { return false; }
  bool FitsSomewhere(const ResourceSet&) const override { return true; }
  std::string NextSpreadNode() override { return ""; }
  Result<std::string> PlaceByLabels(const rpc::TaskSpec&, const ResourceSet&) override { return answer; }
  void CancelTask(const std::string&, const rpc::CancelTask&) override {}
  void KillActor(const std::string&, const std::string&, bool, std::function<void(const Status&)> done) override {
    done(Status::OK());
  }
};

TEST(LabelPlacement, OnlySelectorsWithTheDefaultOrSpreadStrategyArePlacedByLabels) {
  rpc::TaskSpec spec;
  EXPECT_FALSE(PlacedByLabels(spec));
  spec.add_label_selector()->set_key("zone");
  EXPECT_TRUE(PlacedByLabels(spec));
  spec.set_strategy(rpc::STRATEGY_SPREAD);
  EXPECT_TRUE(PlacedByLabels(spec));
  spec.set_strategy(rpc::STRATEGY_NODE_AFFINITY);
  EXPECT_FALSE(PlacedByLabels(spec));
}

TEST(LabelPlacement, AMissWaitsWarningOnceThenFailsAfterTheTimeout) {
  ScriptedNodes remote;
  rpc::TaskSpec spec;
  int64_t since = 0;
  LabelPlacement p = PlaceByLabels(remote, spec, Cpus(1), 60000, &since);
  EXPECT_EQ(p.kind, LabelPlacement::kNode);
  EXPECT_EQ(p.node, "n1");
  EXPECT_EQ(since, 0);

  remote.answer = Status(StatusCode::kInfeasible, "no live node has the labels {zone in (mars)}");
  p = PlaceByLabels(remote, spec, Cpus(1), 60000, &since);
  EXPECT_EQ(p.kind, LabelPlacement::kWait);
  EXPECT_TRUE(p.first_miss);
  EXPECT_NE(since, 0);
  EXPECT_NE(p.why.find("mars"), std::string::npos);
  p = PlaceByLabels(remote, spec, Cpus(1), 60000, &since);
  EXPECT_EQ(p.kind, LabelPlacement::kWait);
  EXPECT_FALSE(p.first_miss);  // (warned once)

  since -= 60000;  // as if the first miss were a minute ago
  p = PlaceByLabels(remote, spec, Cpus(1), 60000, &since);
  EXPECT_EQ(p.kind, LabelPlacement::kFail);
  EXPECT_NE(p.why.find("mars"), std::string::npos);
}

}  // namespace
}  // namespace phalanx::scheduler
