#include "core/status.h"

namespace phalanx {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kTimedOut: return "TimedOut";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kOutOfMemory: return "OutOfMemory";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kTaskFailed: return "TaskFailed";
    case StatusCode::kWorkerDied: return "WorkerDied";
    case StatusCode::kObjectLost: return "ObjectLost";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kActorDied: return "ActorDied";
    case StatusCode::kInfeasible: return "Infeasible";
    case StatusCode::kCollectiveFailed: return "CollectiveFailed";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kActorUnavailable: return "ActorUnavailable";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace phalanx
