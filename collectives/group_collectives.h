// GroupCollectives: the collectives of a static group, rank to rank over the
// connections opened when it formed (GroupLinks), in the caller's thread.
// The algorithm goes by size, as MPI libraries pick theirs:
//
//   allreduce      under kSmallBytes (or fewer elements than ranks):
//                  recursive doubling, log2(n) rounds of the whole array
//                  (ranks past the largest power of two first fold into a
//                  partner, Thakur et al. 2005); above: the ring, reduce-
//                  scatter then allgather, 2(n-1)/n of the array in and out
//                  of each rank, cut into kChunkBytes pieces that each rank
//                  passes on as soon as it has combined them, so the steps
//                  overlap (a pipeline, not n-1 store-and-forward steps)
//   reducescatter  the ring's first half, the parts cut where the caller says
//   broadcast      under kSmallBytes: a binomial tree (log2(n) rounds);
//                  above: a chain from the root, in pieces (each rank passes
//                  a piece on while the next arrives)
//   allgather      the ring, each rank passing on the blocks it receives
//   barrier        recursive doubling of nothing
//   send / recv    one message each way, in pieces
//
// Results are the same bits on every rank (each element is combined in one
// order everywhere, or by commutative pairs). Every wait ends by the call's
// deadline; an error on one rank (a rank gone, a mismatch, the deadline) is
// sent to the others (GroupLinks::Abort) and comes back naming the rank.
// One call at a time per object (the group's calls are sequential).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/group_links.h"
#include "collectives/reduce_ops.h"
#include "core/status.h"

namespace phalanx::collectives {

using phalanx::GroupLinks;

// One call: its number (the same on every rank), what it is ("allreduce sum
// float32 (1000,)": every rank must say the same) and its deadline.
struct GroupCall {
  uint64_t id = 0;
  std::string what;
  GroupLinks::Deadline deadline = GroupLinks::Deadline::max();
};

class GroupCollectives {
 public:
  // Below this many bytes, allreduce and broadcast go by rounds (latency);
  // from it, by ring and chain (bandwidth).
  static constexpr size_t kSmallBytes = 64 << 10;
  // The pieces the ring and the chain pass on (and the largest message).
  static constexpr size_t kChunkBytes = 512 << 10;

  explicit GroupCollectives(GroupLinks* links) : links_(links) {}

  // data[i] = op over every rank's data[i], for i < count.
  Status Allreduce(const GroupCall& c, void* data, size_t count, DType type, ReduceOp op);
  // Part r of data (elements cuts[r] to cuts[r+1]) = op over every rank's
  // part r, on rank r (the other parts are left partly combined). `cuts`:
  // world + 1 ascending element offsets from 0 to data's length.
  Status ReduceScatter(const GroupCall& c, void* data, DType type, ReduceOp op, const std::vector<size_t>& cuts);
  // data = root's data, on every rank.
  Status Broadcast(const GroupCall& c, void* data, size_t nbytes, int root);
  // out holds world blocks of `nbytes`, this rank's in place; each block r =
  // rank r's.
  Status Allgather(const GroupCall& c, void* out, size_t nbytes);
  Status Barrier(const GroupCall& c);
  // Point to point: `data` to rank `to` (queued; returns without waiting for
  // the receiver), and its Recv there.
  Status Send(const GroupCall& c, int to, const void* data, size_t nbytes);
  Status Recv(const GroupCall& c, int from, void* data, size_t nbytes);

  // The element offsets cutting `count` elements into `parts` near-equal
  // parts (as numpy.array_split does).
  static std::vector<size_t> EvenCuts(size_t count, int parts);

 private:
  // The call's end: on an error, the other ranks are told (Abort) first.
  Status Finish(const GroupCall& c, Status st);
  // One message of `nbytes` from `from` into `into` (copied), or combined
  // into it with `op` when `combine`.
  Status Take(const GroupCall& c, int from, char* into, size_t nbytes, bool whole_group, const ReduceOp* op = nullptr,
              DType type = DType::kUInt8);
  // `nbytes` to `to`, in pieces of at most kChunkBytes; TakeAll their match.
  Status PutAll(const GroupCall& c, int to, const char* data, size_t nbytes);
  Status TakeAll(const GroupCall& c, int from, char* into, size_t nbytes, bool whole_group);
  Status RecursiveDoubling(const GroupCall& c, char* data, size_t count, DType type, ReduceOp op);
  // The ring over parts `cuts` (elements of `type`); with `gather`, the
  // allgather half too.
  Status Ring(const GroupCall& c, char* data, DType type, ReduceOp op, const std::vector<size_t>& cuts, bool gather);
  Status Tree(const GroupCall& c, char* data, size_t nbytes, int root);
  Status Chain(const GroupCall& c, char* data, size_t nbytes, int root);

  GroupLinks* links_;
};

}  // namespace phalanx::collectives
