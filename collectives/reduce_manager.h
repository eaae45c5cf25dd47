// ReduceManager: the raylet side of phalanx.collective.reduce. It combines
// numpy arrays (objects whose header names a numeric element type, see
// python/bindings/serialization.cc) into a new object without Python:
//
//   - inputs are combined in the order they become ready, each as soon as it
//     is here, so the reduce overlaps with the tasks still producing the rest;
//   - with num_objects = k it stops after k inputs and leaves the rest alone;
//     an input that failed (its task raised, its worker died, it was lost) is
//     skipped while enough others remain, else the result fails naming it;
//   - inputs of another dtype, size or shape than the first fail the result
//     with a CollectiveFailed error naming both inputs;
//   - a timeout fails the result naming the inputs still missing.
//
// The result is an ordinary object: inline when small, else in the store,
// created at full size when the first input arrives. Large combines run on a
// helper thread, so the raylet's loop keeps serving while they run.
// Everything else is on the raylet's main loop (not thread-safe).
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/reduce_ops.h"
#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "objectstore/object_store.h"
#include "objectstore/object_table.h"

namespace phalanx::collectives {

// Where the array is inside a serialized value (the layout of serialization.cc).
struct ArrayLayout {
  DType dtype = DType::kFloat32;
  uint64_t data_offset = 0;  // the array's bytes start here, after the header and pickle
  uint64_t data_bytes = 0;
};
// The layout of a serialized numpy array, or why `data` is not one
// (InvalidArgument) or holds an error value (TaskFailed).
Result<ArrayLayout> ParseArray(const uint8_t* data, uint64_t size);

class ReduceManager {
 public:
  using InputsCallback = std::function<void(Result<std::vector<std::string>>)>;

  // Combines at least this many bytes on the helper thread, smaller ones inline.
  static constexpr uint64_t kThreadedBytes = 256 << 10;

  ReduceManager(boost::asio::io_context& io, objectstore::ObjectTable* objects, objectstore::ObjectStore* store,
                uint64_t inline_threshold);
  ~ReduceManager();  // waits for a combine in progress

  // Starts a reduce whose result is m.out_id (held by the caller already).
  // InvalidArgument for an unknown op or a bad count, before anything starts.
  Status Start(const rpc::ReduceObjects& m);
  // Calls `cb` with the inputs that went into `out`, in the order they were
  // combined, once it is done (or with why it failed).
  void InputsOf(const std::string& out, InputsCallback cb);
  // `id` was freed: drop what is remembered about it.
  void Forget(const std::string& id);
  // Fails every reduce in progress (the raylet is stopping).
  void Stop(const std::string& why);
  // Told about each result sealed in the store (to list it in the object directory).
  void SetStoredHandler(std::function<void(const std::string& id, uint64_t size)> h) { on_stored_ = std::move(h); }
  size_t num_active() const { return active_.size(); }

 private:
  struct Reduce;
  void Arrived(const std::shared_ptr<Reduce>& r, int index);
  void Pump(const std::shared_ptr<Reduce>& r);
  // Takes input `index` (ready) into the result, or starts doing so on the helper thread.
  void Take(const std::shared_ptr<Reduce>& r, int index);
  void Combined(const std::shared_ptr<Reduce>& r, int index);
  void InputFailed(const std::shared_ptr<Reduce>& r, int index, const std::string& why);
  void Release(Reduce& r, int index);
  void Finish(const std::shared_ptr<Reduce>& r);
  void Fail(const std::shared_ptr<Reduce>& r, StatusCode code, const std::string& why);
  void End(const std::shared_ptr<Reduce>& r, const Status& outcome);
  std::string Name(const Reduce& r, int index) const;

  boost::asio::io_context& io_;
  objectstore::ObjectTable* objects_;
  objectstore::ObjectStore* store_;
  uint64_t inline_threshold_;
  std::function<void(const std::string& id, uint64_t size)> on_stored_;
  boost::asio::thread_pool helper_{1};
  std::unordered_map<std::string, std::shared_ptr<Reduce>> active_;   // by result id
  std::unordered_map<std::string, std::vector<std::string>> inputs_;  // finished: result id -> inputs used
};

}  // namespace phalanx::collectives
