// ObjectTransfer: copies objects between raylets over TCP, chunk by chunk,
// reading from whichever node has the bytes, even a node still receiving them.
//
// Pull(id, hint) makes `id` ready in this node's object table. The source is
// chosen from the object directory (GCS): among the nodes that hold a copy,
// complete or partial, the one serving the fewest readers, so that many
// readers of one object form chains and trees instead of all reading the
// first copy (receiver-driven broadcast). Without directory entries (a
// value not sealed yet, or a small one) the hint node is asked; it answers
// once the object is ready there. Small values come in one reply; a store
// object is created here at full size and filled by `chunk_bytes` requests,
// `window` of them in flight, then sealed.
//
// While a copy is arriving, this node registers itself in the directory as a
// partial location and serves the bytes it already has: a request for a
// range not here yet waits until it arrives.
//
// A source that fails mid-copy (its node died, its own copy failed) is
// replaced by another from the directory; the copy goes on from the chunks
// it already has. With no source left the object is marked lost with a
// reason that names the nodes tried.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "core/framed_connection.h"
#include "objectstore/object_store.h"
#include "objectstore/object_table.h"
#include "objectstore/transport.h"

namespace phalanx::objectstore {

// The largest range one PULL_OBJECT reply carries, whatever was asked.
inline constexpr uint64_t kMaxPullBytes = 64u << 20;

struct TransferOptions {
  uint64_t chunk_bytes = 256 << 10;  // (at most kMaxPullBytes)  // bytes per request (measured: bench/collectives, docs/collectives.md)
  int window = 4;                  // requests in flight per object
};

// The object directory as the transfer layer needs it (the GCS in a raylet:
// scheduler/gcs_object_directory.h; absent in tests that give a hint node only).
class ObjectDirectory {
 public:
  virtual ~ObjectDirectory() = default;
  // Picks the node to read `id` from, in one atomic step: the copy (complete
  // or partial, not `exclude`d; complete only when `resuming`) with the
  // fewest readers, else `hint`; counts this reader on it and (with `list`)
  // lists this node as a partial copy, so the next reader may pick it. "" if none.
  virtual void Pick(const std::string& id, const std::string& hint, bool resuming, bool list,
                    const std::vector<std::string>& exclude, std::function<void(Result<std::string>)> done) = 0;
  // A reader stops (-1) reading `id` from `node` (or starts, +1, when it chose without Pick).
  virtual void Serving(const std::string& id, const std::string& node, int delta) = 0;
  // This node holds `bytes` of `id` (of `size`), complete or not.
  virtual void Located(const std::string& id, uint64_t size, uint64_t bytes, bool complete) = 0;
  // This node holds no copy after all (the copy failed, or the value was small).
  virtual void Unlisted(const std::string& id) = 0;
  // This node holds a complete copy of `id` in the memory of `device`
  // ("cuda:0"), not in its store (ObjectManager::AddDeviceObject).
  virtual void DeviceLocated(const std::string& id, uint64_t size, const std::string& device) = 0;
};

// Refs nested in values that cross nodes (the ObjectManager's holds; absent
// in tests). A node that serves a value with refs inside to another node
// lends it each ref (holds it for that node, one count each time); the
// reader borrows them (ObjectTable::AddBorrowed) and releases what it does not need.
class RefLender {
 public:
  virtual ~RefLender() = default;
  // Holds `id` once more for `node`, which reads a value that holds it.
  virtual void Lend(const std::string& node, const std::string& id) = 0;
  // Lets go of one hold of each of `ids` that `node` has for this node.
  virtual void Release(const std::string& node, const std::vector<std::string>& ids) = 0;
};

class ObjectTransfer {
 public:
  // `transport` carries range requests to other nodes (null: this node only
  // serves). `objects` and `store` are the node's, owned by the caller.
  ObjectTransfer(ObjectTable* objects, ObjectStore* store, std::unique_ptr<Transport> transport,
                 TransferOptions options = {}, ObjectDirectory* directory = nullptr, std::string self_id = "",
                 RefLender* refs = nullptr);

  void Pull(const std::string& id, const std::string& hint_node);
  // A Pull from `node` only, which may not have `id` yet: it is asked to
  // wait up to `wait_ms` for the object to start arriving there (a ring of
  // copies, each node reading from the one before it). If `node` fails,
  // the copy fails (no other source is tried).
  void CopyFrom(const std::string& id, const std::string& node, uint32_t wait_ms);
  // Fails a copy still arriving (Pull or CopyFrom) with `why`: it is no longer wanted.
  void StopCopy(const std::string& id, const std::string& why);
  // Answers request `request_id` (maybe later, when the bytes are here):
  // `send` gets the whole reply frame. Its body is a u32 length, a
  // PullObjectReply without its data, then the bytes themselves: a range is
  // written from the store (the frame holds a lease on its space) and copied
  // once on its way in, from the connection's buffer into the store.
  using SendFrame = std::function<void(OutFrame frame)>;
  void Serve(const rpc::PullObject& m, uint64_t request_id, SendFrame send);
  // The body of such a reply: `meta` and where its bytes are in `body`.
  static bool ParseReply(const char* body, size_t len, rpc::PullObjectReply* meta, const char** data, size_t* size);
  // Objects made here range by range (a reduce step's partial result):
  // other nodes read the bytes made so far and wait for the rest, as from a
  // copy still arriving. Produce creates `id` in the store at `size` and lists
  // this node as a partial location; Advance says bytes [0, bytes) are final;
  // Complete seals it; Abort drops the space and fails its readers with `why`
  // (and marks it lost here when `mark_lost`).
  Result<uint8_t*> Produce(const std::string& id, uint64_t size);
  void Advance(const std::string& id, uint64_t bytes);
  void Complete(const std::string& id);
  void Abort(const std::string& id, const std::string& why, bool mark_lost);
  // Copies `id` from another node (chosen as for Pull) into memory the
  // caller gives, not into an object of its own: `sink(size)` is asked for
  // the destination when the size is known; `progress` runs as for Watch.
  // Nothing is listed in the directory or served from here. `key` names the
  // copy (for Cancel); it must differ from any object id pulled here. With
  // `wait_ms`, as CopyFrom: from hint_node only, which may not have it yet.
  using Sink = std::function<Result<uint8_t*>(uint64_t size)>;
  using Progress = std::function<void(uint64_t size, uint64_t bytes, const Status& st)>;
  void PullInto(const std::string& key, const std::string& id, const std::string& hint_node, Sink sink,
                Progress progress, uint32_t wait_ms = 0);
  // As PullInto, for a destination that is not host memory (a device buffer
  // written through staging, objectstore/staged_device.h): `open(size)` gives
  // the writer once the size is known, and each range is handed to it as it
  // arrives (the bytes are valid during the call only). A writer's error
  // fails the copy with it. `progress` says bytes [0, n) were handed over.
  using ChunkWriter = std::function<Status(uint64_t offset, const char* data, size_t len)>;
  using Opener = std::function<Result<ChunkWriter>(uint64_t size)>;
  void PullChunks(const std::string& key, const std::string& id, const std::string& hint_node, Opener open,
                  Progress progress, uint32_t wait_ms = 0);
  // Stops a PullInto (before its destination goes away).
  void Cancel(const std::string& key);

  // Objects whose bytes are not in the store (device memory read through
  // staging, objectstore/staged_device.h): a range asked of `id` is read
  // with `read`, which answers once (maybe later) with the bytes and what
  // keeps them valid until the reply is sent, or with why it cannot.
  // Unserve stops serving it (requests after that find it gone).
  using RangeDone =
      std::function<void(const Status& st, const char* data, size_t n, std::shared_ptr<const void> keep)>;
  using RangeSource = std::function<void(uint64_t offset, uint64_t length, RangeDone done)>;
  void ServeFrom(const std::string& id, uint64_t size, RangeSource read);
  void Unserve(const std::string& id) { sources_.erase(id); }

  // Progress of an object here (arriving, being made, or ready): `cb(size,
  // bytes, st)` runs whenever more bytes are final, last with bytes == size,
  // or once with a failed `st`. REQUIRES: the caller holds `id`.
  void Watch(const std::string& id, Progress cb);
  // Progress of long copies (docs/observability.md): fn(object id, bytes here, size,
  // seconds so far, source node) for each copy into the store running longer
  // than `after`, at most once per `every` for each copy.
  void ForEachSlowCopy(std::chrono::steady_clock::time_point now, std::chrono::milliseconds after,
                       std::chrono::milliseconds every,
                       const std::function<void(const std::string&, uint64_t, uint64_t, double,
                                                const std::string&)>& fn);

  // The timeline (core/trace.h): a kInFlight kTransfer record for each copy
  // into this node that has begun (is sized) and not ended, at most `max`.
  void TraceInFlight(std::string* out, size_t max) const;

  // What this node measured of its links to each node: the time a full chunk
  // takes to arrive (with `window` of them in flight) and the shortest round
  // trip seen. Defaults (1 Gbit/s, 0.5 ms) until measured.
  struct Link {
    double bytes_per_s = 125e6;
    double rtt_s = 0.5e-3;
    bool measured = false;
  };
  Link LinkTo(const std::string& node) const;

  // Whether `id` is a copy this node pulled (the task that made it, if any,
  // is another node's record). Forget drops the mark.
  bool IsCopy(const std::string& id) const { return copies_.count(id) > 0; }
  // Whether `id` is being copied or made here (Pull, CopyFrom, Produce).
  bool Arriving(const std::string& id) const { return pulls_.count(id) > 0; }
  void Forget(const std::string& id) { copies_.erase(id); }
  // A node that serves an object keeps it while readers keep asking: each
  // request holds it until `linger` after the last one. Requests that wait
  // for an object not here yet (PullObject.wait_ms) and whose time is up
  // are answered that it never came. Call periodically.
  void ReleaseIdle(std::chrono::steady_clock::time_point now, std::chrono::milliseconds linger);
  size_t num_pulling() const { return pulls_.size(); }
  const TransferOptions& options() const { return options_; }

 private:
  struct Waiter {
    uint64_t offset = 0;
    uint64_t length = 0;
    uint64_t request_id = 0;
    SendFrame send;
    std::chrono::steady_clock::time_point deadline{};  // (a request for an object not here yet)
    std::string refs_for;  // the reader node that takes the refs inside (the first range, with_refs)
  };
  enum ChunkState : uint8_t { kMissing = 0, kRequested = 1, kHave = 2 };
  struct PullState {
    std::string hint;
    bool fixed = false;                       // CopyFrom: hint is the only source
    uint32_t wait_ms = 0;                     // CopyFrom: how long the source may wait for the object
    std::string source;                       // node read from now ("" while choosing)
    std::unordered_set<std::string> tried;    // sources that failed us
    std::string last_error;
    uint64_t epoch = 0;                       // bumps at each new source; older replies are dropped
    bool sized = false;
    uint64_t size = 0;
    std::vector<uint8_t> chunks;              // ChunkState per chunk
    uint64_t prefix = 0;                      // bytes [0, prefix) are here
    size_t cursor = 0;                        // first chunk that may be missing
    int inflight = 0;                         // requests of this epoch
    std::vector<Waiter> waiters;              // Serve requests for bytes not here yet
    std::vector<Progress> watchers;
    bool produced = false;                    // made here (Produce), not copied
    std::string object;                       // the object copied (the key is the object, but for a sink)
    Opener open;                              // PullInto/PullChunks: where the bytes go (null: the store)
    ChunkWriter writer;                       // ... once opened
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point reported{};  // ForEachSlowCopy's last report of it
    std::chrono::steady_clock::time_point no_room_since{};  // the store had no room for it (spilling may make some)
  };
  // Tells the watchers of `id` where it stands (st: failed).
  void Notify(const std::string& id, uint64_t size, uint64_t bytes, const Status& st);
  // A copy or product that failed: its readers get `reply`, its space goes,
  // its watchers hear `why`; marked lost here when `mark_lost`.
  void Discard(const std::string& id, PullState& p, const rpc::PullObjectReply& reply, const std::string& why,
               bool mark_lost, bool copies_gone = false);
  void Measure(const std::string& node, double seconds, uint64_t bytes);
  void ChooseSource(const std::string& id);
  // The timeline's record of a copy that ended (core/trace.h).
  void TraceCopy(const PullState& p, uint16_t flags);
  // A copy not yet sized ends when the object gets its value here otherwise.
  void EndWhenMadeHere(const std::string& id);
  // `counted`: the directory already counts this reader on `node`.
  void UseSource(const std::string& id, const std::string& node, bool counted);
  void RequestMore(const std::string& id);
  void OnReply(const std::string& id, uint64_t epoch, uint64_t chunk, const Status& st, const char* body,
               size_t len, const std::string& node);
  // Names the refs inside `id` in `r` for the waiter's node and lends them to it (w.refs_for).
  void LendRefs(const std::string& id, const Waiter& w, rpc::PullObjectReply* r);
  // The current source failed (`what` follows its name: ": lost", " sent ..."): try another, or give up.
  void SourceFailed(const std::string& id, const std::string& what);
  void Finish(const std::string& id);
  // The store here has no room for `id` now: asks for the first range again
  // a little later (processes may let go of mappings, so more can be
  // spilled), for up to kNoRoomPatience. False: give up now.
  bool WaitForRoom(const std::string& id, PullState& p, const Status& why);
  // `copies_gone`: no node has a copy left to read from (the table may have it made again).
  void Fail(const std::string& id, const std::string& why, bool copies_gone = false);
  void ServeWaiters(PullState& p, const std::string& id);
  void ReplyRange(const std::string& id, uint64_t size, uint64_t store_offset, const Waiter& w);
  void ServeReady(const std::string& id, Waiter w);
  // A copy or product of `id` begins here: requests that waited for it are its readers now.
  void TakeExpected(const std::string& id, PullState& p);

  ObjectTable* objects_;
  ObjectStore* store_;
  std::unique_ptr<Transport> transport_;
  TransferOptions options_;
  ObjectDirectory* directory_;  // may be null
  RefLender* refs_;             // may be null
  std::string self_;
  std::unordered_map<std::string, PullState> pulls_;
  std::unordered_set<std::string> copies_;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> lingering_;  // id -> last request
  std::unordered_map<std::string, std::vector<Waiter>> early_;  // requests for objects not ready, nor arriving yet
  std::unordered_map<std::string, std::vector<Waiter>> expected_;  // requests that wait for objects unknown here
  std::unordered_map<std::string, Link> links_;                 // node id -> measured
  struct Source {
    uint64_t size = 0;
    RangeSource read;
  };
  std::unordered_map<std::string, Source> sources_;  // ServeFrom: objects served from outside the store
};

}  // namespace phalanx::objectstore
