// ShmRegion: one anonymous shared-memory file (memfd) mapped into this
// process. The raylet creates it once; clients receive its descriptor over
// the Unix socket (SCM_RIGHTS) and map it once, so an object is an offset
// into a mapping every process on the node already has. Pages are allocated
// by the kernel on first touch. Thread-safe (immutable after creation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace phalanx::objectstore {

class ShmRegion {
 public:
  // Creates a region of `capacity` bytes.
  static Result<std::unique_ptr<ShmRegion>> Create(uint64_t capacity, const std::string& name);
  // Maps an existing region from a descriptor; takes ownership of `fd`.
  static Result<std::unique_ptr<ShmRegion>> Map(int fd, uint64_t capacity);
  ~ShmRegion();

  uint8_t* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  int fd() const { return fd_; }
  // Returns the pages of [offset, offset + size) to the kernel.
  void Discard(uint64_t offset, uint64_t size);

 private:
  ShmRegion(int fd, uint8_t* base, uint64_t capacity) : fd_(fd), base_(base), capacity_(capacity) {}
  int fd_;
  uint8_t* base_;
  uint64_t capacity_;
};

// Default store capacity: 30% of physical memory, as Ray does.
uint64_t DefaultStoreCapacity();

}  // namespace phalanx::objectstore
