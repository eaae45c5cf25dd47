// Allreduces: the raylet side of phalanx.collective.allreduce(refs). Every
// input gets its own result, made on the input's node, so the process that
// produced an input (a simulator, a trainer replica) reads the reduced value
// from its own node's store.
//
// Large arrays go as reduce-scatter + allgather over the inputs' nodes, the
// shape of a ring allreduce, built while the inputs are still futures:
//
//   - the value is cut into as many slices as there are inputs. Slice s is
//     reduced by a chain of ReduceSteps that starts at the s-th input to
//     become ready and visits the others in the order they became ready
//     (wrapping around): each link reads the slice's partial result as it
//     grows, adds its own input's slice and serves the sum to the next link;
//   - every link is placed as soon as its input is ready, without waiting
//     for the links before it (a link asks for its prev before prev exists;
//     the node that makes it answers once it does);
//   - the last link of slice s holds that slice of the result; each input's
//     node then assembles its result from all the slices (ReduceSteps::
//     Assemble) while they are still being reduced, copying each slice made
//     elsewhere from the node before it in the ring (the inputs' nodes in the
//     order the inputs became ready), which made or copies it too: so each
//     node reads from one node only, as in a ring allgather, and holds its
//     result for this node (which records where it is).
//
// Each node sends and receives 2(n-1)/n of the value in all, the least any
// allreduce can (Patarasuk and Yuan 2009), and the slices' chains run side by
// side. Reduction starts as soon as the first two inputs exist.
//
// Small arrays (under kMinSlice per slice), a raylet without peers, and
// inputs that are not store objects go the cheap way instead: one reduce on
// this node (ReduceManager), copied into each result here.
//
// Errors: mismatched inputs, a lost or failed input, a node that dies, or the
// timeout fail every result not yet made with the reason (no partial or
// stale result is ever handed out). Not thread-safe; lives on the raylet's
// main loop.
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/reduce_manager.h"
#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "objectstore/object_store.h"
#include "objectstore/object_table.h"

namespace phalanx::collectives {

class Allreduces {
 public:
  // The smallest slice worth a chain of its own: below it, the cheap way.
  static constexpr uint64_t kMinSlice = 64 << 10;
  // Slices start at multiples of this (whole elements, whatever the dtype).
  static constexpr uint64_t kSliceAlign = 4096;
  // How long a node may wait for the node before it in the ring to start
  // copying a slice (they start within milliseconds of each other).
  static constexpr uint32_t kRingWaitMs = 30000;

  // `chain`: how the sliced way reaches other nodes (the CollectiveWire;
  // null: all go the cheap way; outlives this). `on_stored`
  // (may be null) is told about each result stored here by the cheap way
  // (for the object directory).
  Allreduces(boost::asio::io_context& io, objectstore::ObjectTable* objects, objectstore::ObjectStore* store,
             ReduceManager* reduces, ReduceChain* chain = nullptr, ReduceManager::StoredHandler on_stored = {});
  // Starts an allreduce of m.input_ids into m.out_ids (held by the caller
  // already). InvalidArgument for a bad request, before anything starts.
  Status Start(const rpc::ReduceObjects& m);
  // Fails every allreduce in progress (the raylet is stopping).
  void Stop(const std::string& why);
  // Where slice s of `size` bytes cut `n` ways starts (the last runs to size).
  static std::vector<uint64_t> Cuts(uint64_t size, size_t n);
  uint64_t num_sliced() const { return num_sliced_; }
  size_t num_active() const { return active_.size(); }

 private:
  struct Allreduce;
  void Located(const std::shared_ptr<Allreduce>& r, int index);
  void GoCheap(const std::shared_ptr<Allreduce>& r);
  void CopyResult(const std::shared_ptr<Allreduce>& r);
  // Input `index` (on `node`) is ready: a link of every slice's chain.
  void Arrive(const std::shared_ptr<Allreduce>& r, int index, const std::string& node);
  void Place(const std::shared_ptr<Allreduce>& r, size_t slice);
  void AssembleAll(const std::shared_ptr<Allreduce>& r);
  void Assembled(const std::shared_ptr<Allreduce>& r, int index, const Status& st);
  void Fail(const std::shared_ptr<Allreduce>& r, StatusCode code, const std::string& why);
  void End(const std::shared_ptr<Allreduce>& r);

  boost::asio::io_context& io_;
  objectstore::ObjectTable* objects_;
  objectstore::ObjectStore* store_;
  ReduceManager* reduces_;
  ReduceChain* chain_;  // null: every allreduce the cheap way
  const std::string& self() const;
  ReduceManager::StoredHandler on_stored_;
  uint64_t num_sliced_ = 0;
  std::unordered_map<std::string, std::shared_ptr<Allreduce>> active_;  // by the first result's id
};

}  // namespace phalanx::collectives
