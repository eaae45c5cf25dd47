// ObjectStore: the node's shared-memory objects: an object table over one
// ShmRegion and its OffsetAllocator. An object is created (space reserved,
// written by a client through its own mapping), sealed (immutable, readable),
// pinned while any process maps it, and deleted when its owner says so —
// deletion waits for the last pin. Sealed, unpinned objects marked evictable
// (secondary copies) are dropped, least recently used first, to make room.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "objectstore/allocator.h"
#include "objectstore/shm_region.h"

namespace phalanx::objectstore {

struct StoreEntry {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool sealed = false;
  int64_t pins = 0;
  bool delete_when_unpinned = false;
  bool evictable = false;
  std::list<std::string>::iterator lru;  // valid when evictable
  bool aged = false;
  std::list<std::string>::iterator age;  // valid when aged: sealed, not evictable (spill candidates)
};

struct StoreStats {
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t objects = 0;
  uint64_t pinned = 0;
  uint64_t evictable_bytes = 0;
};

class ObjectStore {
 public:
  // Called with the id of each object evicted to make room.
  using EvictHandler = std::function<void(const std::string& id)>;

  explicit ObjectStore(std::unique_ptr<ShmRegion> region);

  // Reserves `size` bytes for `id`. OutOfMemory (with capacity, use and pins
  // in the message) when no room can be made; AlreadyExists for a known id.
  Result<uint64_t> Create(const std::string& id, uint64_t size);
  // REQUIRES: Create(id) succeeded. NotFound otherwise.
  Status Seal(const std::string& id);
  // Drops an unsealed object (its creator failed).
  void Abort(const std::string& id);
  // Pins a sealed object against deletion and eviction.
  Status Pin(const std::string& id);
  void Unpin(const std::string& id);
  // Deletes now, or at the last Unpin.
  void Delete(const std::string& id);
  // Takes back a sealed object whose deletion waits for its last pin (its
  // id is wanted again: ids name immutable values). False if there is none.
  bool Revive(const std::string& id);
  // A secondary copy: may be evicted when space is needed.
  void MarkEvictable(const std::string& id);
  // Keeps the space of `id` (sealed or not) from being reused while the
  // returned token lives: a socket write straight from the store holds one
  // until the kernel has the bytes. Deleting or aborting the object meanwhile
  // still removes it; only its space waits. Null if `id` is not here.
  std::shared_ptr<const void> Lease(const std::string& id);

  // Sealed objects that may be written to disk and dropped to make room
  // (objectstore/spill_files.h): not mapped by any process, not being sent,
  // not evictable, not being deleted. Least recently sealed or mapped first, until their sizes
  // add up to `bytes`; `skip` ids are passed over.
  std::vector<std::string> SpillCandidates(uint64_t bytes, const std::unordered_set<std::string>& skip) const;
  // Whether `size` bytes would fit now without evicting or spilling.
  bool Fits(uint64_t size) const { return allocator_.largest_free() >= size; }

  const StoreEntry* Find(const std::string& id) const;
  uint8_t* base() const { return region_->base(); }
  const ShmRegion& region() const { return *region_; }
  StoreStats Stats() const;
  // Calls fn(id, size) for each sealed object not being deleted.
  template <typename F>
  void ForEachSealed(F&& fn) const {
    for (const auto& [id, e] : objects_) {
      if (e.sealed && !e.delete_when_unpinned) fn(id, e.size);
    }
  }
  void SetEvictHandler(EvictHandler h) { on_evict_ = std::move(h); }

 private:
  void Free(std::unordered_map<std::string, StoreEntry>::iterator it);
  bool EvictFor(uint64_t size);
  void EndLease(uint64_t offset);

  std::unique_ptr<ShmRegion> region_;
  OffsetAllocator allocator_;
  std::unordered_map<std::string, StoreEntry> objects_;
  std::list<std::string> lru_;  // evictable ids, least recent first
  std::list<std::string> age_;  // other sealed ids, least recently sealed or pinned first
  uint64_t evictable_bytes_ = 0;
  uint64_t pinned_objects_ = 0;
  EvictHandler on_evict_;
  std::unordered_map<uint64_t, int64_t> leases_;  // offset -> live tokens
  std::unordered_set<uint64_t> freed_leased_;     // offsets whose object went while leased
  std::shared_ptr<char> alive_ = std::make_shared<char>();  // expires with the store: later tokens do nothing
};

}  // namespace phalanx::objectstore
