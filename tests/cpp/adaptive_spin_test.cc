// AdaptiveSpin (core/adaptive_spin.h): the full spin while replies come
// within it, halved after each wait that outlasted it down to none, tried in
// full every 16th wait, and full again once a reply comes quickly.
#include "core/adaptive_spin.h"

#include <gtest/gtest.h>

namespace phalanx {
namespace {

using std::chrono::microseconds;

TEST(AdaptiveSpinTest, QuickRepliesKeepTheFullSpin) {
  AdaptiveSpin s(150);
  for (int i = 0; i < 100; ++i) {
    int b = s.Budget();
    EXPECT_EQ(b, 150);
    s.Done(microseconds(60), b);
  }
}

TEST(AdaptiveSpinTest, SlowRepliesHalveItToNoneAndAQuickOneRestoresIt) {
  AdaptiveSpin s(160);
  std::vector<int> seen;
  for (int i = 0; i < 6; ++i) {
    int b = s.Budget();
    seen.push_back(b);
    s.Done(microseconds(900), b);
  }
  EXPECT_EQ(seen, (std::vector<int>{160, 80, 40, 20, 10, 0}));
  // Without a spin, a reply that a spin would have caught brings it back.
  s.Done(microseconds(40), 0);
  EXPECT_EQ(s.Budget(), 160);
}

TEST(AdaptiveSpinTest, WithoutASpinEverySixteenthWaitTriesTheFullOne) {
  AdaptiveSpin s(150);
  for (int b = s.Budget(); b > 0; b = s.Budget()) s.Done(microseconds(5000), b);
  int full = 0;
  for (int i = 0; i < 64; ++i) {
    int b = s.Budget();
    if (b == 150) ++full;
    s.Done(microseconds(5000), b);
  }
  EXPECT_EQ(full, 4);
}

}  // namespace
}  // namespace phalanx
