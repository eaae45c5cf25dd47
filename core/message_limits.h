// What one message may ask of the process that receives it. A count or a
// size in a message decides how much its receiver allocates or keeps, so
// each is checked against a documented limit before anything is made for it
// (docs/protocol.md, "Limits"); a message past a limit gets a clear error
// back, and nothing of it is kept. Frame sizes are limited per type in
// core/frame.h. Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx {

inline constexpr int kMaxReturns = 10000;       // return values of one task
inline constexpr int kMaxArgs = 100000;         // arguments of one task
inline constexpr int kMaxIdsPerMessage = 1 << 20;  // refs nested in one task's arguments
// (Lists of ids in other requests are bounded by their frame's limit, kListBody.)
inline constexpr double kMaxResourceAmount = 1e12;  // any one resource a task asks for

// Whether `amount` is a quantity a task may ask for: a finite number in [0, kMaxResourceAmount].
bool IsResourceAmount(double amount);
// OK if IsResourceAmount; else says so, naming the resource and (`what`) the task.
Status CheckResourceAmount(const std::string& name, double amount, const std::string& what);

// Whether `id` is an object id (kObjectIdSize bytes), and every id of `ids`
// is; `ids` may be empty. Messages whose ids are malformed are refused whole.
bool IsObjectId(const std::string& id);
template <typename Ids>
bool AllObjectIds(const Ids& ids) {
  for (const auto& id : ids) {
    if (!IsObjectId(id)) return false;
  }
  return true;
}
// The ids of a task's results, and what they contain, are object ids.
bool ResultIdsOk(const rpc::TaskDone& done);

// A runtime environment's limits (its env_vars set a worker's environment;
// its packages are function-table entries of kPackageIdSize-byte ids).
inline constexpr int kMaxEnvVars = 1024;
inline constexpr size_t kMaxEnvBytes = 1u << 20;
inline constexpr int kMaxPyModules = 64;
inline constexpr size_t kPackageIdSize = 16;
// OK if `env` is well-formed: env_vars sorted, unique, named as shell
// variables, none PHALANX_* (the worker's own), no NUL, within the limits
// above; package ids of the right size. Says what is wrong otherwise.
Status CheckRuntimeEnv(const rpc::RuntimeEnv& env);

// A task's label selectors (scheduler/label_match.h): at most kMaxLabelConstraints keys a selector (and values
// a key, and fallback selectors), keys and values of at most kMaxLabelBytes, known operators.
inline constexpr int kMaxLabelConstraints = 64;
inline constexpr size_t kMaxLabelBytes = 256;
Status CheckLabelSelectors(const rpc::TaskSpec& spec);

// OK if the spec is well-formed and within the limits: ids of the right
// sizes, num_returns in [0, kMaxReturns], at most kMaxArgs arguments and
// kMaxIdsPerMessage nested refs, finite non-negative resources, a known
// language and kind. Says which field is wrong otherwise.
Status ValidateTaskSpec(const rpc::TaskSpec& spec);

}  // namespace phalanx
