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
// Two ways to combine, chosen when the first input is located:
//
//   - here (local): every input is copied to this node (the caller's) and
//     added into the result as it arrives. Small objects, and inputs that are
//     all here, go this way. Large combines run on a helper thread, so the
//     raylet's loop keeps serving while they run.
//   - chain: inputs stay where they were made (ObjectTable::SetRemote). The
//     node of the 2nd input to be located reads the 1st as it streams in and
//     adds its own (a ReduceStep), the node of the 3rd reads that partial
//     result while it grows, and so on; this node copies the last partial
//     into the result. Each link carries the object once, so the whole reduce
//     costs about one transfer plus a chunk per hop, where the local way
//     costs one transfer per input into this node. Each link is placed where
//     its input is when the chain reaches it, not where it was located (a
//     task's result made on another node comes back to the caller's node,
//     and the other node may drop its copy). Chosen when the cost model
//     over the measured link (ObjectTransfer::LinkTo) says it is faster. If a
//     link fails because a node died mid-chain, the chain goes on from the
//     last partial result before that node (the links before it are not
//     redone): the dead node's input is lost (a spare stands in, or the
//     result fails naming it) and the inputs after it are placed again. Any
//     other failure (or a second one) starts the reduce over the local way
//     with the inputs left.
//
// The result is an ordinary object: inline when small, else in the store.
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
// "reduce inputs do not match: ..." for inputs named `a` and `b` whose
// headers differ: their dtypes and sizes, or that only the shape differs.
std::string MismatchMessage(const std::string& a, const ArrayLayout& la, const std::string& b, const ArrayLayout& lb);

class ReduceSteps;

// What the chain needs from the raylet: its own steps, its links, the other
// nodes' steps (the CollectiveWire implements it; tests fake it or give none:
// every reduce is then made on this node).
class ReduceChain {
 public:
  virtual ~ReduceChain() = default;
  // This node's steps (the final copy into the result runs here) and id.
  virtual ReduceSteps* steps() = 0;
  virtual const std::string& self() const = 0;
  // Bytes per request of a copy between nodes.
  virtual uint64_t chunk_bytes() const = 0;
  // Runs a ReduceStep on `node` (this one or another); `started` gets its answer.
  virtual void SendStep(const std::string& node, const rpc::ReduceStep& m,
                        std::function<void(const Status&)> started) = 0;
  // Frees partial results on `node` (this one or another; one-way).
  virtual void Drop(const std::string& node, const std::vector<std::string>& ids) = 0;
  // Measured bandwidth (bytes/s) and per-hop delay (s) to a node.
  virtual std::pair<double, double> Link(const std::string& node) = 0;
  // Whether `node`'s raylet answers (within a short timeout).
  virtual void Probe(const std::string& node, std::function<void(bool alive)> done) = 0;
  // Makes an allreduce's result on `node` (ReduceSteps::Assemble there); `done`
  // once it is whole (then held there for this node) or failed.
  virtual void Assemble(const std::string& node, const rpc::AssembleSlices& m,
                        std::function<void(const Status&)> done) = 0;
  // Lets go of objects `node` holds for this node.
  virtual void Release(const std::string& node, const std::vector<std::string>& ids) = 0;
  // Fails objects `node` waits for (an allreduce's results there, held by
  // whoever will read them) with `why`.
  virtual void Lose(const std::string& node, const std::vector<std::string>& ids, StatusCode code,
                    const std::string& why) = 0;
  // Frees partial results, (id, node) each: one Drop per node.
  void DropAll(const std::vector<std::pair<std::string, std::string>>& partials);
};

// The chain's node id, or "" without a chain (tests: every reduce on this node).
const std::string& SelfOf(const ReduceChain* chain);

// "input 3 (ObjectRef(<hex id>))", as errors name a collective's inputs.
std::string InputName(int index, const std::string& id);
// Where a collective's input is, without copying it: its node (`self` for a
// store object here) and size, or ("", 0) with `v` saying what it is (small,
// failed, lost).
std::pair<std::string, uint64_t> Where(objectstore::ObjectTable& objects, const std::string& self,
                                       const std::string& id, rpc::ObjectValue* v);
// Calls `located(i)` on a later turn of `io` once input i is ready, lost or known to be on another node.
void WhenLocated(boost::asio::io_context& io, objectstore::ObjectTable& objects, const std::vector<std::string>& ids,
                 std::function<void(int)> located);

class ReduceManager {
 public:
  using InputsCallback = std::function<void(Result<std::vector<std::string>>)>;

  // Combines at least this many bytes on the helper thread, smaller ones inline.
  static constexpr uint64_t kThreadedBytes = 256 << 10;

  // Told about each result sealed in the store (to list it in the object directory).
  using StoredHandler = std::function<void(const std::string& id, uint64_t size)>;

  // `chain`: how reduces reach other nodes (the CollectiveWire; null:
  // every reduce is local). `on_stored` may be null.
  ReduceManager(boost::asio::io_context& io, objectstore::ObjectTable* objects, objectstore::ObjectStore* store,
                uint64_t inline_threshold, ReduceChain* chain = nullptr, StoredHandler on_stored = {});
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
  // Whether a chain over `n` inputs of `size` bytes beats copying them all
  // here, over a link of `bytes_per_s` with `hop_s` of delay per link.
  static bool ChainPays(uint64_t size, size_t n, double bytes_per_s, double hop_s, uint64_t chunk_bytes);
  // How the reduces so far went: chains started, and chains that fell back.
  uint64_t num_chains() const { return num_chains_; }
  uint64_t num_fallbacks() const { return num_fallbacks_; }
  uint64_t num_rewinds() const { return num_rewinds_; }
  size_t num_active() const { return active_.size(); }

 private:
  struct Reduce;
  // Chain mode (see above).
  void Located(const std::shared_ptr<Reduce>& r, int index);
  void GoLocal(const std::shared_ptr<Reduce>& r);
  void PlaceNext(const std::shared_ptr<Reduce>& r);
  void RunFinal(const std::shared_ptr<Reduce>& r);
  void ChainFailed(const std::shared_ptr<Reduce>& r, const Status& why);
  // After probing the chain's nodes: goes on from the last partial result
  // before the first dead node, or over the local way.
  void Rewind(const std::shared_ptr<Reduce>& r, const Status& why, const std::unordered_map<std::string, bool>& alive);
  void FallBack(const std::shared_ptr<Reduce>& r, const Status& why);
  // An input whose step failed (its node died, or it is gone there): once
  // per input, copied to this node or made again, then placed here; the
  // second failure fails it.
  void Refetch(const std::shared_ptr<Reduce>& r, int index, const std::string& why);
  // Where input `index`, located on `node`, is now (`node` if nowhere).
  std::string Relocate(const Reduce& r, int index, const std::string& node) const;
  // A step reading what the chain made so far into `out` (its input to be set).
  rpc::ReduceStep NextStep(const Reduce& r, const std::string& out) const;
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
  ReduceChain* chain_;  // null: every reduce is made here
  const std::string& self() const;
  StoredHandler on_stored_;
  uint64_t num_chains_ = 0;
  uint64_t num_fallbacks_ = 0;
  uint64_t num_rewinds_ = 0;
  boost::asio::thread_pool helper_{1};
  std::unordered_map<std::string, std::shared_ptr<Reduce>> active_;   // by result id
  std::unordered_map<std::string, std::vector<std::string>> inputs_;  // finished: result id -> inputs used
};

}  // namespace phalanx::collectives
