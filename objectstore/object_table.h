// ObjectTable: every object this node knows about and who holds it.
//
// An object is pending (its task has not finished), inline (a small value
// kept in raylet memory), in the store (shared memory, see ObjectStore) or
// lost (with the reason). Holders are counted: each client process that has
// an ObjectRef to it, each queued or running task that takes it as an
// argument, each object whose value contains a reference to it. When the
// count drops to zero the value is freed (the store copy when the last
// mapping is released) and the contained references are dropped in turn.
// Waiters registered with OnReady run once the object is ready or lost.
// When the store has no room for a create, sealed store objects nobody maps
// are spilled to disk (EnableSpilling): they stay ready here, and come back
// into memory for OnResident waiters (on the spill files' I/O thread) or, at
// once, for a pinning Describe.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "core/proto/phalanx.pb.h"
#include "objectstore/object_store.h"
#include "objectstore/spill_files.h"

namespace phalanx::objectstore {

class ObjectTable {
 public:
  using ReadyCallback = std::function<void()>;

  // What the table tells the one that owns it (the node's ObjectManager,
  // objectstore/object_manager.h), given at construction.
  class Owner {
   public:
    virtual ~Owner() = default;
    // A remote object (SetRemote) is needed here: copy it from `node`.
    virtual void Demand(const std::string& id, const std::string& node) = 0;
    // A remote object was freed, copied here or lost: `node` may let go of
    // the `holds` it has for this node.
    virtual void Drop(const std::string& id, const std::string& node, uint32_t holds) = 0;
    // `id` was freed (to clean the directory and the task table).
    virtual void Freed(const std::string& id, bool was_in_store) = 0;
    // The store is full and nothing in it can be spilled: every object left is
    // mapped by a process (maybe only kept mapped for a later get).
    virtual void StoreFull() {}
    // Every copy of pending object `id` is gone (`why`): start making it
    // again if that can be done (true: it stays pending), else false with
    // *reason saying why not.
    virtual bool Rebuild(const std::string& id, const std::string& why, std::string* reason) { return false; }
    // The entry of `id` left the table (freed, with or without a value here).
    virtual void Gone(const std::string& id) {}
    // Remote object `id` (SetRemote) has its value here now: a copy arrived.
    virtual void CopiedHere(const std::string& id) {}
  };

  // `owner` (may be null: nobody is told) outlives the table.
  explicit ObjectTable(ObjectStore* store, Owner* owner = nullptr) : store_(store), owner_(owner) {}

  // Spills to `files` from now on (docs/fault-tolerance.md, "Spilling"); `io`
  // runs the retries of a restore that found no room. Both outlive the table.
  void EnableSpilling(SpillFiles* files, boost::asio::io_context* io) {
    files_ = files;
    io_ = io;
  }
  // Whether `id` is ready here with its value in memory (not spilled), or
  // lost, or freed (a Describe says which).
  bool IsResident(const std::string& id) const;
  // Runs `cb` once `id` is resident: when it is ready (as OnReady), after
  // bringing it back from disk when it was spilled.
  void OnResident(const std::string& id, ReadyCallback cb);
  bool IsSpilled(const std::string& id) const;
  // Runs `fn` a little later, when spilling is on (the store may have room
  // then: processes let go of mappings, spills end). False (and `fn` never
  // runs) without spilling.
  bool RetrySoon(std::function<void()> fn);
  size_t num_spilled() const { return num_spilled_; }
  // Calls fn(id, size) for each spilled object.
  template <typename F>
  void ForEachSpilled(F&& fn) const {
    for (const auto& [id, e] : entries_) {
      if (e.state == State::kSpilled) fn(id, e.size);
    }
  }

  // What `phalanx memory` shows of an entry.
  struct EntryView {
    const char* where;  // "store", "spilled", "inline", "remote", "pending", "lost"
    uint64_t size;
    int64_t refs;
    const std::vector<std::string>* contained;
    const std::string* remote_node;
  };
  // Calls fn(id, EntryView) for each entry.
  template <typename F>
  void ForEachEntry(F&& fn) const {
    for (const auto& [id, e] : entries_) {
      const char* where = "pending";
      uint64_t size = e.size;
      switch (e.state) {
        case State::kInline: where = "inline"; size = e.data.size(); break;
        case State::kInStore: where = "store"; break;
        case State::kSpilled: where = "spilled"; break;
        case State::kLost: where = "lost"; break;
        case State::kPending:
          if (!e.remote_node.empty()) {
            where = "remote";
            size = e.remote_size;
          }
          break;
      }
      fn(id, EntryView{where, size, e.refs, &e.contained, &e.remote_node});
    }
  }

  // Holder counting. AddRef on an unknown id creates a pending entry.
  void AddRef(const std::string& id);
  void RemoveRef(const std::string& id);

  // Values. Each REQUIRES the object not to be ready yet; a second value for a
  // ready object is ignored (a retried task may finish twice).
  void PutInline(const std::string& id, std::string data, std::vector<std::string> contained);
  // Reserves store space for `id`; the caller seals later with SealInStore.
  // AlreadyExists when it has a value (then ready: see ReviveFromStore).
  Result<uint64_t> CreateInStore(const std::string& id, uint64_t size, std::vector<std::string> contained);
  Status SealInStore(const std::string& id);
  // CreateInStore + copy `data` in + SealInStore, for values that arrive over the network.
  Status PutInStore(const std::string& id, const std::string& data, std::vector<std::string> contained);
  void AbortCreate(const std::string& id);
  // A pending object whose earlier copy is still in the store (freed here,
  // but pinned by a reader): that copy becomes its value. False if none.
  bool ReviveFromStore(const std::string& id);
  void MarkLost(const std::string& id, StatusCode code, const std::string& why);
  // Every copy of pending `id` is gone (a copy found no node left to read
  // from): the owner rebuilds it if it can (Owner::Rebuild; it stays
  // pending, its waiters wait on), else it is lost with both reasons.
  void LoseCopies(const std::string& id, const std::string& why);

  // Remote values: a store value made on another node (a direct actor call's
  // result) stays there until someone here needs its bytes. SetRemote records
  // where it is (the object stays pending here); the first OnReady waiter, now
  // or later, makes the owner copy it here (Demand). OnLocated runs
  // when the object is ready, lost or known to be remote, without demanding
  // it (a reduce reads inputs where they are). When a remote object is
  // freed, copied here (by whatever path) or lost, the owner is told (Drop),
  // with how many holds that node has for us, so that it lets go of them.
  // SetRemote counts one hold at `node`; false when this node has the object
  // otherwise (its value, or remote at another node): the caller then
  // releases that hold at once.
  bool SetRemote(const std::string& id, const std::string& node, uint64_t size);
  // Refs that arrived from `node` inside a value or a task: counts one
  // reference to each here (the caller's, to drop when it has attached them to
  // what holds them) and one hold of each at `node` (which lent it). An id this
  // node knew nothing of becomes remote at `node`; the ids whose hold at `node`
  // is not needed (known here otherwise) are returned, to release at once.
  std::vector<std::string> AddBorrowed(const std::vector<std::string>& ids, const std::string& node);
  void OnLocated(const std::string& id, ReadyCallback cb);
  // The node holding a pending remote object, else "".
  std::string RemoteNode(const std::string& id) const;
  uint64_t RemoteSize(const std::string& id) const;
  // The holds a pending remote object has at its node pass to the caller,
  // who releases them there (Owner::Drop is not told of them any more):
  // {node, holds}, or {"", 0} when it has none.
  std::pair<std::string, uint32_t> TakeRemoteHolds(const std::string& id);

  // Runs `cb` when `id` is ready or lost (now, if it already is).
  void OnReady(const std::string& id, ReadyCallback cb);
  bool IsReady(const std::string& id) const;
  // Ready as a failure: lost, or an inline value that is its task's error.
  bool IsFailed(const std::string& id) const;
  bool Contains(const std::string& id) const { return entries_.count(id) > 0; }
  // Whether the object's value holds references to other objects.
  bool ContainsRefs(const std::string& id) const { return !Contained(id).empty(); }
  // The ids its value holds references to (none when unknown).
  const std::vector<std::string>& Contained(const std::string& id) const {
    static const std::vector<std::string> kNone;
    auto it = entries_.find(id);
    return it == entries_.end() ? kNone : it->second.contained;
  }
  // Fills `out` with the object's current value. For a store object this
  // pins it; the caller must Unpin (ReleasePin) when the reader is done. A
  // spilled object is read back first when pinning (on this thread: use
  // OnResident before, to have it read on the I/O thread); without pinning
  // it is described as in the store, with its size and no offset.
  void Describe(const std::string& id, rpc::ObjectValue* out, bool pin);
  void ReleasePin(const std::string& id) { store_->Unpin(id); }

  size_t num_entries() const { return entries_.size(); }
  size_t num_inline() const { return num_inline_; }
  uint64_t inline_bytes() const { return inline_bytes_; }
  // True when `id` was freed recently (a reader that comes late gets a clear error).
  bool WasFreed(const std::string& id) const { return freed_set_.count(id) > 0; }

 private:
  enum class State { kPending, kInline, kInStore, kSpilled, kLost };
  struct Entry {
    State state = State::kPending;
    int64_t refs = 0;
    std::string data;   // inline value, or the reason when lost
    StatusCode lost_code = StatusCode::kObjectLost;
    uint64_t size = 0;  // store objects
    bool creating = false;
    std::vector<std::string> contained;
    std::vector<ReadyCallback> waiters;
    std::vector<ReadyCallback> locators;  // OnLocated
    std::string remote_node;              // SetRemote: where the value is, until it is here
    uint32_t remote_holds = 0;            // how many holds remote_node has for us
    uint64_t remote_size = 0;
    bool demanded = false;
    bool restoring = false;                        // kSpilled: being read back into the store
    bool restore_waits = false;                    // kSpilled: a restore found no room (said once)
    std::vector<ReadyCallback> resident_waiters;   // kSpilled: OnResident
  };
  void Demand(const std::string& id, Entry& e);
  void BecomeReady(const std::string& id, Entry& e);
  void MaybeFree(const std::string& id);
  void RememberFreed(const std::string& id);
  // Store space for `id`, spilling others to make room when the store is full.
  // `credit`: bytes on disk that go once this space is filled (a restore's own file).
  Result<uint64_t> CreateSpace(const std::string& id, uint64_t size, uint64_t credit = 0);
  Status MakeRoom(uint64_t size, uint64_t credit);
  Status SpillOne(const std::string& id, uint64_t* credit);
  void StartRestore(const std::string& id, Entry& e);
  void FinishRestore(const std::string& id, const Status& st);
  Status RestoreNow(const std::string& id, Entry& e);
  // A spilled object's value is in the store again: its file goes, its waiters run (later, when `post`).
  void Restored(const std::string& id, Entry& e, bool post);
  // Runs (and drops) the OnResident waiters of `id`, then frees it if nobody holds it.
  void RunResidentWaiters(const std::string& id, Entry& e);

  ObjectStore* store_;
  std::unordered_map<std::string, Entry> entries_;
  size_t num_inline_ = 0;
  uint64_t inline_bytes_ = 0;
  Owner* owner_;
  std::deque<std::string> freed_order_;
  std::unordered_set<std::string> freed_set_;
  SpillFiles* files_ = nullptr;
  boost::asio::io_context* io_ = nullptr;
  size_t num_spilled_ = 0;
  bool disk_full_ = false;  // the last MakeRoom stopped at the disk's limit
  std::shared_ptr<char> alive_ = std::make_shared<char>();  // timers that outlive the table do nothing
};

}  // namespace phalanx::objectstore
