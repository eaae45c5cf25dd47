#include "objectstore/allocator.h"

#include "core/logging.h"

namespace phalanx::objectstore {

OffsetAllocator::OffsetAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity & ~(alignment - 1)), alignment_(alignment) {
  PHALANX_CHECK((alignment & (alignment - 1)) == 0) << "alignment " << alignment;
  if (capacity_ > 0) InsertFree(0, capacity_);
}

void OffsetAllocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_[offset] = size;
  free_by_size_.emplace(size, offset);
}

void OffsetAllocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  auto range = free_by_size_.equal_range(it->second);
  for (auto s = range.first; s != range.second; ++s) {
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  }
  free_by_offset_.erase(it);
}

std::optional<uint64_t> OffsetAllocator::Allocate(uint64_t size) {
  uint64_t need = (std::max<uint64_t>(size, 1) + alignment_ - 1) & ~(alignment_ - 1);
  auto best = free_by_size_.lower_bound(need);
  if (best == free_by_size_.end()) return std::nullopt;
  uint64_t offset = best->second, block = best->first;
  EraseFree(free_by_offset_.find(offset));
  if (block > need) InsertFree(offset + need, block - need);
  allocated_[offset] = need;
  used_ += need;
  return offset;
}

void OffsetAllocator::Free(uint64_t offset) {
  auto a = allocated_.find(offset);
  PHALANX_CHECK(a != allocated_.end()) << "free of unknown offset " << offset;
  uint64_t size = a->second;
  allocated_.erase(a);
  used_ -= size;
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    EraseFree(next);
  }
  auto prev = free_by_offset_.lower_bound(offset);
  if (prev != free_by_offset_.begin()) {
    --prev;
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(offset, size);
}

uint64_t OffsetAllocator::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace phalanx::objectstore
