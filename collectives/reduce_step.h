// ReduceSteps: the links of a reduce chain that run on this node (see
// ReduceManager for who places them). A step reads `prev` (the first input,
// or the partial result of the steps before it) as it grows, here or from
// another node through the transfer layer, adds this node's input range by
// range, and makes `out` range by range, served to the next step while it is
// still being made. A chain of them carries each object once per link, so a
// reduce over n nodes costs about one object transfer plus a chunk per hop,
// instead of n transfers into the caller's node.
//
// A slice step (an allreduce's reduce-scatter) does the same on bytes
// [lo, hi) of the value: its prev and out hold only those; the first link of a
// slice's chain has no prev and copies its input's slice. Its prev may not
// exist yet when it starts (ReduceStep.wait_ms: the allreduce places every
// link at once); the node that will make prev holds the request until it does.
//
// A step without an input copies prev into out: the caller's node ends every
// chain with one, into the reduce's result. prev from another node is copied
// straight into out (ObjectTransfer::PullInto), the input added in place.
//
// Errors: an input that is not a numeric array, or whose dtype, size or shape
// differ from prev's, fails the step naming both; so does a prev that cannot
// be read. A failed step's out fails its readers with the reason, so the
// chain fails all the way to the caller's node, which decides what next.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "collectives/reduce_ops.h"
#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "objectstore/object_store.h"
#include "objectstore/object_table.h"
#include "objectstore/object_transfer.h"

namespace phalanx::collectives {

class ReduceSteps {
 public:
  using Done = std::function<void(const Status&)>;

  ReduceSteps(boost::asio::io_context& io, objectstore::ObjectTable* objects, objectstore::ObjectStore* store,
              objectstore::ObjectTransfer* transfer, std::string self_node);

  // Starts a step. `started` runs once out exists here and can be read (or
  // with why the step cannot start); `done` when out is complete or failed.
  // A step with an input keeps out until Drop; one without (the caller's
  // final copy) leaves its out to its holders, and on failure drops it
  // without marking it lost (the caller decides).
  void Run(const rpc::ReduceStep& m, Done started, Done done);
  // Makes an allreduce's result here from its reduced slices (see
  // rpc::AssembleSlices): each is copied into place as it grows, from a
  // step here or from a copy of it made here from the node before this one
  // in the ring (kept until Drop, for the node after it). `done` runs once
  // out is whole and sealed (out is then left to whoever holds it: hold it
  // inside `done`) or with why it failed (out is dropped).
  void Assemble(const rpc::AssembleSlices& m, Done done);
  // The reduce is over: frees these partial results (failing the steps still
  // making them) and slice copies, and fails these assemblies; with `why`,
  // an assembly's result that someone here still holds fails with it.
  void Drop(const std::vector<std::string>& outs, const std::string& why = "");
  // `node` died: drops the steps of the reduces it placed (nobody is left to).
  void DropFrom(const std::string& node);
  size_t num_steps() const { return steps_.size(); }
  // The timeline (core/trace.h): a kInFlight record for each step and
  // assembly still running here (the dashboard's collectives in flight), at most `max`.
  void TraceInFlight(std::string* out, size_t max) const;

 private:
  struct Step;
  struct Assembly;
  // A slice's first link: out is a copy of the input's slice.
  void Seed(const std::shared_ptr<Step>& s, Done started);
  // Slice `slice` (of `size` bytes, `bytes` final) grew: copies the new bytes into place.
  void SliceProgress(const std::shared_ptr<Assembly>& a, size_t slice, uint64_t size, uint64_t bytes, Status st);
  void EndAssembly(const std::shared_ptr<Assembly>& a, const Status& outcome);
  // Keeps a copy of slice `id` here, copied from `from`, until Drop (the next node in the ring reads it).
  void HoldCopy(const std::string& id, const std::string& from, const rpc::AssembleSlices& m);
  void Progress(const std::shared_ptr<Step>& s, uint64_t size, uint64_t bytes, const Status& st);
  // Creates out once its size is known; why not if it cannot (the step has failed then).
  Status Begin(const std::shared_ptr<Step>& s, uint64_t size);
  void Fail(const std::shared_ptr<Step>& s, const std::string& why);
  void End(const std::shared_ptr<Step>& s, const Status& outcome);
  // Whether `id` is in this node's store, on its disk, or being made or copied here.
  bool HasHere(const std::string& id);
  // Whether `id` is known here and pending, not at another node: a worker of
  // this node is making it (its seal may come after the caller heard of it).
  bool BeingMadeHere(const std::string& id);
  // The transfer key of the copy of prev into `out`.
  static std::string CopyKey(const std::string& out);

  boost::asio::io_context& io_;
  objectstore::ObjectTable* objects_;
  objectstore::ObjectStore* store_;
  objectstore::ObjectTransfer* transfer_;
  std::string self_;
  std::unordered_map<std::string, std::shared_ptr<Step>> steps_;
  // Steps waiting for their input to be sealed here: out id -> the node that placed it (until they start or are dropped).
  std::unordered_map<std::string, std::string> waiting_;  // by out id, until dropped (or done, without input)
  std::unordered_map<std::string, std::shared_ptr<Assembly>> assemblies_;  // by out id, until done
  // Slices copied here for a ring, until dropped: id -> the node whose allreduce it is.
  std::unordered_map<std::string, std::string> copies_;
};

}  // namespace phalanx::collectives
