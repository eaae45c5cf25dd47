// Status and Result<T>: how every component reports failure.
//
// The codes say what the caller should do next, not where the failure came
// from; the message carries the details a person needs (which object, which
// process, which address). Thread-safe as values.
#pragma once

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

namespace phalanx {

// phalanx.cancel(ref, force=True) of an actor's call: refused (caller side and raylet), in Ray's words.
inline constexpr char kNoForceOnActorCalls[] =
    "force=True is not supported for actor tasks: cancel an actor's call with force=False, or stop the actor "
    "with phalanx.kill(actor)";

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   // bad input: fix the call, do not retry
  kNotFound = 2,          // the thing named does not exist (or no longer)
  kTimedOut = 3,          // the deadline passed; the call may be retried
  kUnavailable = 4,       // a peer (raylet, redis, worker) is gone or unreachable
  kOutOfMemory = 5,       // the object store cannot make room
  kAlreadyExists = 6,
  kTaskFailed = 7,        // user code raised; the message holds the traceback
  kWorkerDied = 8,        // a worker process died and retries ran out
  kObjectLost = 9,        // every copy of an object is gone
  kInternal = 10,         // a bug: an invariant did not hold
  kActorDied = 11,        // the actor is dead (killed, crashed past max_restarts, constructor failed)
  kInfeasible = 12,       // no node can ever satisfy the resources asked for
  kCollectiveFailed = 13, // a reduce cannot complete: inputs that do not match, too many failed
  kCancelled = 14,        // the task was cancelled before it finished
  kActorUnavailable = 15, // the actor is restarting: a call it could not take (max_task_retries spent) fails
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status TimedOut(std::string m) { return {StatusCode::kTimedOut, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status OutOfMemory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Result<T> holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Status::Internal("Result built from an OK status without a value");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace phalanx

#define PHALANX_RETURN_IF_ERROR(expr)        \
  do {                                       \
    ::phalanx::Status _st = (expr);          \
    if (!_st.ok()) return _st;               \
  } while (0)

#define PHALANX_CONCAT_INNER(a, b) a##b
#define PHALANX_CONCAT(a, b) PHALANX_CONCAT_INNER(a, b)
#define PHALANX_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto PHALANX_CONCAT(_res_, __LINE__) = (expr);                         \
  if (!PHALANX_CONCAT(_res_, __LINE__).ok())                             \
    return PHALANX_CONCAT(_res_, __LINE__).status();                     \
  lhs = std::move(PHALANX_CONCAT(_res_, __LINE__)).value()
