// OffsetAllocator: best-fit allocation of byte ranges inside one fixed-size
// region (the shared-memory store). Free neighbours are merged at once, so
// the largest free block is always exact. Offsets are aligned to
// `alignment`. Not thread-safe; owned by the ObjectStore.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace phalanx::objectstore {

class OffsetAllocator {
 public:
  // REQUIRES: alignment is a power of two.
  explicit OffsetAllocator(uint64_t capacity, uint64_t alignment = 64);

  // An aligned offset for `size` bytes (0 counts as 1), or nullopt when no
  // free block is large enough.
  std::optional<uint64_t> Allocate(uint64_t size);
  // REQUIRES: `offset` came from Allocate and was not freed since.
  void Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t largest_free() const;
  size_t num_allocations() const { return allocated_.size(); }

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;        // offset -> size
  std::multimap<uint64_t, uint64_t> free_by_size_;     // size -> offset
  std::map<uint64_t, uint64_t> allocated_;             // offset -> size
};

}  // namespace phalanx::objectstore
