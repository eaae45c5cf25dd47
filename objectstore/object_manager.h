// ObjectManager: a node's object layer as one component. It owns the
// shared-memory store (ObjectStore), the node's object table (ObjectTable),
// the copies to and from other nodes (ObjectTransfer over a Transport) and
// the holds across nodes: objects kept here for another node that reads
// them or refers to them, and the holds other nodes keep for this one.
//
// The raylet calls it; it reaches other nodes through a PeerChannel and the
// object directory through an ObjectDirectory, and tells the raylet what it
// must act on through ObjectEvents, all given at construction. Nothing is
// joined afterwards.
//
// Holds across nodes: a node that lends a ref to another (a value, a task or
// a result sent there with the ref inside, or a result kept here for it)
// holds the object here for that node (HoldFor) until that node releases it
// (RELEASE_HELD) or dies (NodeDied). Releases are sent once per node per
// loop turn.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "core/proto/phalanx.pb.h"
#include "core/peer_channel.h"
#include "core/status.h"
#include "objectstore/object_store.h"
#include "objectstore/object_table.h"
#include "objectstore/object_transfer.h"
#include "objectstore/spill_files.h"
#include "objectstore/staged_device.h"
#include "objectstore/transport.h"

namespace phalanx::objectstore {

// How the object layer sends its own messages (RELEASE_HELD) to other nodes:
// the raylet's peer connections.
// What the raylet acts on.
class ObjectEvents {
 public:
  virtual ~ObjectEvents() = default;
  // `id` was freed here. `was_copy`: it had been copied from another node
  // (the task that made it is that node's record, not this one's).
  virtual void OnObjectFreed(const std::string& id, bool was_in_store, bool was_copy) = 0;
  // Another node adopted `ids` from `holder` (a client of this node, which
  // made them): that node holds them now, so the holder's holds may go.
  virtual void OnAdopted(const std::string& holder, const std::vector<std::string>& ids) = 0;
  // The store is full and every object in it is mapped by a process: ask the
  // processes to let go of the mappings they keep only for later gets.
  virtual void OnStoreFull() {}
  // Every copy of `id` is gone: true when the raylet makes it again
  // (lineage), else false with *reason saying why it cannot.
  virtual bool OnCopiesLost(const std::string& id, const std::string& why, std::string* reason) { return false; }
  // `id` left the node's object table.
  virtual void OnEntryGone(const std::string& id) {}
  // A copy of remote object `id` arrived here.
  virtual void OnCopiedHere(const std::string& id) {}
};

class ObjectManager {
 public:
  // A node keeps an object it serves this long after the last range asked of it.
  static constexpr std::chrono::milliseconds kServeLinger{1000};
  // How long a RELEASE_HELD may take to be answered.
  static constexpr int64_t kReleaseTimeoutMs = 5000;

  // `self`: this node's id. `transport` carries this node's range requests
  // (null: it only serves). `peers` and `events` are owned by the caller
  // and outlive this; `events` may be null (nobody is told).
  ObjectManager(boost::asio::io_context& io, std::string self, std::unique_ptr<ObjectStore> store, std::unique_ptr<Transport> transport,
                PeerChannel* peers, ObjectEvents* events, TransferOptions options = {},
                ObjectDirectory* directory = nullptr);
  ObjectManager(const ObjectManager&) = delete;
  ObjectManager& operator=(const ObjectManager&) = delete;

  ObjectStore& store() { return *store_; }
  // From now on, a create that finds the store full writes objects nobody
  // maps to files under `options.dir` (ObjectTable::EnableSpilling).
  void EnableSpilling(SpillOptions options);
  // The spill files' counters (all zero without spilling).
  SpillStats spill_stats() const { return spill_ ? spill_->Stats() : SpillStats{}; }
  ObjectTable& table() { return table_; }
  ObjectTransfer& transfer() { return transfer_; }
  // Holds for other nodes as a RefLender (Lend: HoldFor; Release), for the collectives' results.
  RefLender* lender() { return &owner_; }
  const std::string& self() const { return self_; }

  // Copies `ids`, which live on `node`, into this node (ObjectTransfer::Pull).
  void Fetch(const std::vector<std::string>& ids, const std::string& node);
  // Asks `node` to hold `ids` for this node from now on, instead of `holder`
  // (the client there that made them and may exit): they stay there until
  // this node releases them (or dies).
  void Adopt(const std::string& node, const std::string& holder, const std::vector<std::string>& ids);
  // Lets go of holds `node` has for this node: `counts[i]` of ids[i] (none
  // given: one each). Sent in one message per node per loop turn.
  void Release(const std::string& node, const std::vector<std::string>& ids, const std::vector<uint32_t>& counts = {});
  // Holds `id` for `node` once more, until that node releases it (or dies).
  void HoldFor(const std::string& node, const std::string& id);
  // Drops `count` holds of `id` for `node` (all of them when count exceeds what is held).
  void Unhold(const std::string& node, const std::string& id, uint32_t count);
  // Refs nested in values that arrived from `node` (ObjectTable::AddBorrowed):
  // their holds there that are not needed are released.
  void Borrow(const std::vector<std::string>& ids, const std::string& node);
  // Lists this node's complete store copy of `id` in the object directory.
  void ListInDirectory(const std::string& id, uint64_t size);
  // Lists every complete store copy of this node again (the GCS came back,
  // maybe without its last writes). Returns how many.
  size_t ListAllInDirectory();

  // Device objects (objectstore/staged_device.h): `size` bytes at `addr` in
  // the memory of `device` (which outlives them), made by a process here.
  // Other nodes copy them through host staging, chunk by chunk; the
  // directory lists this node's copy with the device's name. The caller
  // holds `id` in the table as for any object.
  Status AddDeviceObject(const std::string& id, Device* device, uint64_t addr, uint64_t size,
                         StagingOptions staging = {});
  void RemoveDeviceObject(const std::string& id);
  // Copies `id` from `node` (or a copy the directory names) into the memory
  // of `device` at `addr`, which has room for `capacity` bytes, through host
  // staging; `done` runs once every byte is on the device (with the
  // object's size), or with why not.
  void FetchToDevice(const std::string& id, const std::string& node, Device* device, uint64_t addr,
                     uint64_t capacity, std::function<void(Result<uint64_t>)> done, StagingOptions staging = {});

  // The object layer's messages from other nodes, already authenticated and
  // parsed, ids checked well-formed: a range request (PULL_OBJECT; `send`
  // gets the reply frame) and a release or adoption (RELEASE_HELD).
  void ServePull(const rpc::PullObject& m, uint64_t request_id, ObjectTransfer::SendFrame send);
  void HandleReleaseHeld(const rpc::ReleaseHeld& m);

  // `node` died: what was held here for it goes, nothing more is released there.
  void NodeDied(const std::string& node);
  // Objects served to readers that stopped asking are let go. Call periodically.
  void ReleaseIdle(std::chrono::steady_clock::time_point now);

  // Calls fn(node, id, holds) for each object held here for another node.
  template <typename F>
  void ForEachHeldFor(F&& fn) const {
    for (const auto& [node, ids] : held_for_) {
      for (const auto& [id, n] : ids) fn(node, id, n);
    }
  }
  // How many objects are held here for `node` (tests, stats).
  size_t num_held_for(const std::string& node) const;
  // Holds of `id` for `node`.
  uint32_t holds_for(const std::string& node, const std::string& id) const;

 private:
  // The table's owner (demand copies, drop remote holds, tell the raylet of
  // frees) and the transfers' lender of nested refs (holds for the reader).
  class TableOwner : public ObjectTable::Owner, public RefLender {
   public:
    explicit TableOwner(ObjectManager* m) : m_(m) {}
    void Demand(const std::string& id, const std::string& node) override;
    void Drop(const std::string& id, const std::string& node, uint32_t holds) override;
    void Freed(const std::string& id, bool was_in_store) override;
    void StoreFull() override {
      if (m_->events_) m_->events_->OnStoreFull();
    }
    bool Rebuild(const std::string& id, const std::string& why, std::string* reason) override {
      return m_->events_ != nullptr && m_->events_->OnCopiesLost(id, why, reason);
    }
    void Gone(const std::string& id) override {
      if (m_->events_) m_->events_->OnEntryGone(id);
    }
    void CopiedHere(const std::string& id) override {
      if (m_->events_) m_->events_->OnCopiedHere(id);
    }
    void Lend(const std::string& node, const std::string& id) override { m_->HoldFor(node, id); }
    void Release(const std::string& node, const std::vector<std::string>& ids) override { m_->Release(node, ids); }

   private:
    ObjectManager* m_;
  };
  void FlushReleases();

  boost::asio::io_context& io_;
  std::string self_;
  PeerChannel* peers_;
  ObjectEvents* events_;
  ObjectDirectory* directory_;  // may be null
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<SpillFiles> spill_;  // EnableSpilling
  TableOwner owner_;
  ObjectTable table_;
  ObjectTransfer transfer_;
  // node id -> objects this node holds for it (and how many times), until it releases them or dies
  std::unordered_map<std::string, std::unordered_map<std::string, uint32_t>> held_for_;
  // node id -> (object id -> holds) to release there, sent at the end of this loop turn
  std::unordered_map<std::string, std::unordered_map<std::string, uint32_t>> releasing_;
  bool release_posted_ = false;
  std::unordered_map<std::string, std::shared_ptr<StagedSource>> device_objects_;  // AddDeviceObject
  uint64_t device_copies_ = 0;                                                     // FetchToDevice keys
};

}  // namespace phalanx::objectstore
