// ShmRegion: one anonymous shared-memory file (memfd) mapped into this
// process. The raylet creates it once; clients receive its descriptor over
// the Unix socket (SCM_RIGHTS) and map it once, so an object is an offset
// into a mapping every process on the node already has. Pages are allocated
// by the kernel on first touch, or ahead of it (Populate, in the raylet).
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

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
  // Makes the pages below `end` resident, on a thread of the region's, ahead
  // of the writer: the first write to a page costs a fault that zero-fills
  // it, 8192 for 32 MiB. Once: the region keeps a high-water mark.
  void Populate(uint64_t end);

 private:
  ShmRegion(int fd, uint8_t* base, uint64_t capacity) : fd_(fd), base_(base), capacity_(capacity) {}
  int fd_;
  uint8_t* base_;
  uint64_t capacity_;
  // The populating thread's: pages below populated_ are resident, target_ is where it goes.
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t populated_ = 0, target_ = 0;
  bool stop_ = false;
  std::thread populator_;
};

// Default store capacity: 30% of physical memory, as Ray does.
uint64_t DefaultStoreCapacity();

}  // namespace phalanx::objectstore
