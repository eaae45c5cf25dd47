#include "scheduler/resource_ledger.h"

#include <gtest/gtest.h>

#include "core/ids.h"

namespace phalanx::scheduler {

namespace {
ResourceSet R(std::map<std::string, double> m) { return ResourceSet(std::move(m)); }
const std::string kGroup(kTaskIdSize, 'g');
}  // namespace

TEST(ResourceLedgerTest, AcquireAndReleasePlainResources) {
  ResourceLedger l(R({{"CPU", 2}, {"GPU", 1}}));
  std::vector<int> gpus;
  ASSERT_TRUE(l.TryAcquire(R({{"CPU", 1}, {"GPU", 1}}), &gpus));
  EXPECT_EQ(gpus, std::vector<int>{0});
  std::vector<int> none;
  EXPECT_FALSE(l.TryAcquire(R({{"GPU", 1}}), &none));  // the one GPU is taken
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 1);
  l.Release(R({{"CPU", 1}, {"GPU", 1}}), gpus);
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 2);
  EXPECT_TRUE(l.TryAcquire(R({{"GPU", 1}}), &none));
}

TEST(ResourceLedgerTest, LentResourcesComeBackOnce) {
  ResourceLedger l(R({{"CPU", 1}}));
  std::vector<int> gpus;
  ASSERT_TRUE(l.TryAcquire(R({{"CPU", 1}}), &gpus));
  l.Lend(R({{"CPU", 1}}));  // the holder blocks in a get
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 1);
  l.Release(R({{"CPU", 1}}), gpus, /*lent=*/true);  // it ends while blocked
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 1);
}

TEST(ResourceLedgerTest, TwoPhaseBundleBecomesTheGroupsOwn) {
  ResourceLedger l(R({{"CPU", 4}}));
  ASSERT_TRUE(l.Prepare(kGroup, 0, R({{"CPU", 2}})).ok());
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 2);  // set aside, not usable by anyone yet
  EXPECT_EQ(l.BundlesOf(kGroup).size(), 0u);
  ASSERT_TRUE(l.Commit(kGroup, 0).ok());
  EXPECT_EQ(l.BundlesOf(kGroup), std::vector<int>{0});
  ResourceSet in0 = ResourceLedger::InBundle(R({{"CPU", 1}}), kGroup, 0);
  ResourceSet any = ResourceLedger::InBundle(R({{"CPU", 1}}), kGroup, -1);
  std::vector<int> g1, g2, g3;
  EXPECT_TRUE(l.TryAcquire(in0, &g1));
  EXPECT_TRUE(l.TryAcquire(any, &g2));
  EXPECT_FALSE(l.TryAcquire(any, &g3));  // the bundle's 2 CPUs are in use
  EXPECT_FALSE(l.TryAcquire(ResourceLedger::InBundle(R({{"CPU", 1}}), kGroup, 1), &g3));  // no bundle 1 here
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 2);  // the plain pool is untouched
  l.Release(in0, g1);
  EXPECT_TRUE(l.TryAcquire(any, &g3));
}

TEST(ResourceLedgerTest, PrepareRefusesWhatIsNotFreeAndAbortGivesBack) {
  ResourceLedger l(R({{"CPU", 2}}));
  Status st = l.Prepare(kGroup, 0, R({{"CPU", 3}}));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("does not fit"), std::string::npos);
  ASSERT_TRUE(l.Prepare(kGroup, 0, R({{"CPU", 2}})).ok());
  EXPECT_TRUE(l.Prepare(kGroup, 0, R({{"CPU", 2}})).ok());  // asked twice: set aside once
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 0);
  l.Abort(kGroup, 0);
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 2);
  EXPECT_FALSE(l.Commit(kGroup, 0).ok());  // nothing prepared any more
}

TEST(ResourceLedgerTest, ReturningAGroupInUseGivesEachPartBackOnce) {
  ResourceLedger l(R({{"CPU", 4}}));
  for (int i : {0, 1}) {
    ASSERT_TRUE(l.Prepare(kGroup, i, R({{"CPU", 1}})).ok());
    ASSERT_TRUE(l.Commit(kGroup, i).ok());
  }
  ResourceSet task = ResourceLedger::InBundle(R({{"CPU", 1}}), kGroup, 1);
  std::vector<int> gpus;
  ASSERT_TRUE(l.TryAcquire(task, &gpus));
  l.ReturnGroup(kGroup);
  EXPECT_TRUE(l.Removed(kGroup));
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 3);  // the unused bundle at once
  for (const auto& [k, v] : l.total().amounts()) EXPECT_EQ(k.find("_group_"), std::string::npos) << k;
  l.Release(task, gpus);  // the task in the removed group ends
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 4);
  for (const auto& [k, v] : l.available().amounts()) EXPECT_EQ(k.find("_group_"), std::string::npos) << k;
  EXPECT_FALSE(l.Prepare(kGroup, 0, R({{"CPU", 1}})).ok());  // a removed group is gone for good
}

TEST(ResourceLedgerTest, AGroupRemovedWhileItsTaskIsBlockedComesOutEven) {
  ResourceLedger l(R({{"CPU", 2}}));
  ASSERT_TRUE(l.Prepare(kGroup, 0, R({{"CPU", 1}})).ok());
  ASSERT_TRUE(l.Commit(kGroup, 0).ok());
  ResourceSet task = ResourceLedger::InBundle(R({{"CPU", 1}}), kGroup, 0);
  std::vector<int> gpus;
  ASSERT_TRUE(l.TryAcquire(task, &gpus));
  l.Lend(task);  // it blocks in a get
  l.ReturnGroup(kGroup);
  l.Reclaim(task);  // it wakes up ...
  l.Release(task, gpus);  // ... and ends
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 2);
  for (const auto& [k, v] : l.available().amounts()) EXPECT_EQ(k.find("_group_"), std::string::npos) << k;
}

TEST(ResourceLedgerTest, CreateAndRemoveInALoopKeepsNothing) {
  ResourceLedger l(R({{"CPU", 2}}));
  for (int i = 0; i < 1000; ++i) {
    std::string pg(kTaskIdSize, static_cast<char>(i % 250));
    pg[0] = static_cast<char>(i / 250);
    ASSERT_TRUE(l.Prepare(pg, 0, R({{"CPU", 1}})).ok());
    ASSERT_TRUE(l.Commit(pg, 0).ok());
    l.ReturnGroup(pg);
  }
  EXPECT_EQ(l.names_kept(), 0u);
  EXPECT_EQ(l.total().amounts().size(), 1u);
  EXPECT_DOUBLE_EQ(l.available().Get("CPU"), 2);
}

TEST(ResourceLedgerTest, BundleGpusGiveIdsToItsTasks) {
  ResourceLedger l(R({{"CPU", 2}, {"GPU", 2}}));
  ASSERT_TRUE(l.Prepare(kGroup, 0, R({{"GPU", 1}})).ok());
  ASSERT_TRUE(l.Commit(kGroup, 0).ok());
  std::vector<int> plain, in_bundle, more;
  EXPECT_TRUE(l.TryAcquire(R({{"GPU", 1}}), &plain));  // the GPU outside the bundle
  EXPECT_FALSE(l.TryAcquire(R({{"GPU", 1}}), &more));
  ASSERT_TRUE(l.TryAcquire(ResourceLedger::InBundle(R({{"GPU", 1}}), kGroup, 0), &in_bundle));
  ASSERT_EQ(in_bundle.size(), 1u);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_NE(in_bundle[0], plain[0]);
}

TEST(ResourceLedgerTest, InBundleNamesAndMarksTheBundle) {
  ResourceSet r = ResourceLedger::InBundle(R({{"CPU", 2}, {"lang:1", 0}}), kGroup, 3);
  std::string hex = ToHex(kGroup);
  EXPECT_DOUBLE_EQ(r.Get("CPU_group_3_" + hex), 2);
  EXPECT_DOUBLE_EQ(r.Get("CPU_group_" + hex), 2);
  EXPECT_GT(r.Get("bundle_group_3_" + hex), 0);  // even a task asking for nothing lands on the bundle's node
  EXPECT_EQ(r.amounts().count("lang:1"), 1u);     // queue keys stay as they are
  EXPECT_DOUBLE_EQ(r.Get("CPU"), 0);
}

}  // namespace phalanx::scheduler
