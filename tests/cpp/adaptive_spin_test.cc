// AdaptiveSpin (core/adaptive_spin.h): the full spin until four waits in a
// row outlast it, then none, tried in full every 16th wait, and full again
// once a reply comes within it.
#include "core/adaptive_spin.h"

#include <gtest/gtest.h>

#include <vector>

namespace phalanx {
namespace {

using std::chrono::microseconds;

TEST(AdaptiveSpinTest, RepliesThatStraddleTheSpinKeepIt) {
  AdaptiveSpin s(150);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(s.Budget(), 150);
    s.Done(microseconds(i % 3 == 0 ? 400 : 90));  // (never four long ones in a row)
  }
}

TEST(AdaptiveSpinTest, FourLongWaitsInARowStopItAndAQuickReplyBringsItBack) {
  AdaptiveSpin s(150);
  std::vector<int> seen;
  for (int i = 0; i < 6; ++i) {
    seen.push_back(s.Budget());
    s.Done(microseconds(900));
  }
  EXPECT_EQ(seen, (std::vector<int>{150, 150, 150, 150, 0, 0}));
  s.Done(microseconds(40));  // (a wait without a spin that one would have caught)
  EXPECT_EQ(s.Budget(), 150);
}

TEST(AdaptiveSpinTest, WithoutASpinEverySixteenthWaitTriesTheFullOne) {
  AdaptiveSpin s(150);
  for (int i = 0; i < 4; ++i) s.Done(microseconds(5000));
  int full = 0;
  for (int i = 0; i < 64; ++i) {
    if (s.Budget() == 150) ++full;
    s.Done(microseconds(5000));
  }
  EXPECT_EQ(full, 4);
}

}  // namespace
}  // namespace phalanx
