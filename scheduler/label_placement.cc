#include "scheduler/label_placement.h"

#include <chrono>

#include "scheduler/label_match.h"

namespace phalanx::scheduler {

bool PlacedByLabels(const rpc::TaskSpec& spec) {
  return HasLabelSelector(spec) &&
         (spec.strategy() == rpc::STRATEGY_DEFAULT || spec.strategy() == rpc::STRATEGY_SPREAD);
}

LabelPlacement PlaceByLabels(RemoteNodes& remote, const rpc::TaskSpec& spec, const ResourceSet& need,
                             int64_t timeout_ms, int64_t* unmet_since) {
  LabelPlacement p;
  auto where = remote.PlaceByLabels(spec, need);
  if (where.ok()) {
    p.node = where.value();
    return p;
  }
  p.why = where.status().message();
  p.first_miss = *unmet_since == 0;
  p.kind = StillLooking(unmet_since, timeout_ms) ? LabelPlacement::kWait : LabelPlacement::kFail;
  return p;
}

bool StillLooking(int64_t* since, int64_t window_ms) {
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  if (*since == 0) *since = now;
  return now - *since < window_ms;
}

}  // namespace phalanx::scheduler
