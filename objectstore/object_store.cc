#include "objectstore/object_store.h"

#include "core/ids.h"
#include "core/logging.h"

namespace phalanx::objectstore {

ObjectStore::ObjectStore(std::unique_ptr<ShmRegion> region)
    : region_(std::move(region)), allocator_(region_->capacity()) {}

static std::string Mib(uint64_t b) { return std::to_string(b >> 20) + " MiB"; }

Result<uint64_t> ObjectStore::Create(const std::string& id, uint64_t size) {
  if (objects_.count(id)) return Status::AlreadyExists("object " + ToHex(id) + " already exists in the store");
  if (size > allocator_.capacity()) {
    return Status::OutOfMemory("object of " + std::to_string(size) + " bytes is larger than the whole object store (" +
                               Mib(allocator_.capacity()) + "); start phalanx with a larger object_store_memory");
  }
  auto off = allocator_.Allocate(size);
  if (!off && EvictFor(size)) off = allocator_.Allocate(size);
  if (!off) {
    StoreStats s = Stats();
    return Status::OutOfMemory("object store is full: cannot fit " + std::to_string(size) + " bytes (capacity " +
                               Mib(s.capacity) + ", in use " + Mib(s.used) + " by " + std::to_string(s.objects) +
                               " objects, " + std::to_string(s.pinned) +
                               " of them mapped by a process; largest free block " +
                               Mib(allocator_.largest_free()) + "). Drop references to objects you no longer need.");
  }
  region_->Populate(*off + size);
  StoreEntry& e = objects_[id];
  e.offset = *off;
  e.size = size;
  return *off;
}

Status ObjectStore::Seal(const std::string& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return Status::NotFound("seal of unknown object " + ToHex(id));
  StoreEntry& e = it->second;
  e.sealed = true;
  if (!e.evictable && !e.aged) {
    e.aged = true;
    e.age = age_.insert(age_.end(), id);
  }
  return Status::OK();
}

void ObjectStore::Abort(const std::string& id) {
  auto it = objects_.find(id);
  if (it != objects_.end() && !it->second.sealed) Free(it);
}

Status ObjectStore::Pin(const std::string& id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second.sealed) return Status::NotFound("object " + ToHex(id) + " is not in the store");
  StoreEntry& e = it->second;
  if (e.pins++ == 0) ++pinned_objects_;
  if (e.evictable) {  // most recently used now
    lru_.splice(lru_.end(), lru_, e.lru);
  }
  if (e.aged) age_.splice(age_.end(), age_, e.age);  // spilled last
  return Status::OK();
}

void ObjectStore::Unpin(const std::string& id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.pins == 0) return;
  if (--it->second.pins == 0) {
    --pinned_objects_;
    if (it->second.delete_when_unpinned) Free(it);
  }
}

void ObjectStore::Delete(const std::string& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  if (it->second.pins > 0) {
    it->second.delete_when_unpinned = true;
    return;
  }
  Free(it);
}

bool ObjectStore::Revive(const std::string& id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second.sealed || !it->second.delete_when_unpinned) return false;
  it->second.delete_when_unpinned = false;
  return true;
}

void ObjectStore::MarkEvictable(const std::string& id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.evictable) return;
  if (it->second.aged) {
    age_.erase(it->second.age);
    it->second.aged = false;
  }
  it->second.evictable = true;
  it->second.lru = lru_.insert(lru_.end(), id);
  evictable_bytes_ += it->second.size;
}

const StoreEntry* ObjectStore::Find(const std::string& id) const {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : &it->second;
}

void ObjectStore::Free(std::unordered_map<std::string, StoreEntry>::iterator it) {
  StoreEntry& e = it->second;
  if (e.evictable) {
    lru_.erase(e.lru);
    evictable_bytes_ -= e.size;
  }
  if (e.aged) age_.erase(e.age);
  if (e.pins > 0) --pinned_objects_;
  if (leases_.count(e.offset)) {
    freed_leased_.insert(e.offset);  // the space goes when the last lease ends
  } else {
    allocator_.Free(e.offset);
  }
  objects_.erase(it);
}

std::shared_ptr<const void> ObjectStore::Lease(const std::string& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return nullptr;
  uint64_t offset = it->second.offset;
  ++leases_[offset];
  std::weak_ptr<char> alive = alive_;
  return std::shared_ptr<const void>(region_->base() + offset, [this, alive, offset](const void*) {
    if (!alive.expired()) EndLease(offset);
  });
}

void ObjectStore::EndLease(uint64_t offset) {
  auto it = leases_.find(offset);
  if (it == leases_.end() || --it->second > 0) return;
  leases_.erase(it);
  if (freed_leased_.erase(offset)) allocator_.Free(offset);
}

bool ObjectStore::EvictFor(uint64_t size) {
  bool evicted = false;
  for (auto id = lru_.begin(); id != lru_.end() && allocator_.largest_free() < size;) {
    auto it = objects_.find(*id++);
    if (it->second.pins > 0) continue;
    std::string victim = it->first;
    Free(it);
    evicted = true;
    if (on_evict_) on_evict_(victim);
  }
  return evicted;
}

std::vector<std::string> ObjectStore::SpillCandidates(uint64_t bytes, const std::unordered_set<std::string>& skip) const {
  std::vector<std::string> out;
  uint64_t total = 0;
  for (const auto& id : age_) {
    if (total >= bytes) break;
    const StoreEntry& e = objects_.at(id);
    if (e.pins > 0 || e.delete_when_unpinned || leases_.count(e.offset) || skip.count(id)) continue;
    out.push_back(id);
    total += e.size;
  }
  return out;
}

StoreStats ObjectStore::Stats() const {
  return StoreStats{allocator_.capacity(), allocator_.used(), objects_.size(), pinned_objects_, evictable_bytes_};
}

}  // namespace phalanx::objectstore
