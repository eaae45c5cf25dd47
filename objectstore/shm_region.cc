#include "objectstore/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace phalanx::objectstore {

Result<std::unique_ptr<ShmRegion>> ShmRegion::Create(uint64_t capacity, const std::string& name) {
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return Status::Unavailable(std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    return Status::OutOfMemory("cannot size the object store to " + std::to_string(capacity) + " bytes: " + why);
  }
  return Map(fd, capacity);
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::Map(int fd, uint64_t capacity) {
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    std::string why = std::strerror(errno);
    ::close(fd);
    return Status::Unavailable("cannot map the object store (" + std::to_string(capacity) + " bytes): " + why);
  }
  return std::unique_ptr<ShmRegion>(new ShmRegion(fd, static_cast<uint8_t*>(p), capacity));
}

ShmRegion::~ShmRegion() {
  ::munmap(base_, capacity_);
  ::close(fd_);
}

void ShmRegion::Discard(uint64_t offset, uint64_t size) {
  // Whole pages only; the partial pages at either end stay.
  const uint64_t page = 4096;
  uint64_t start = (offset + page - 1) & ~(page - 1);
  uint64_t end = (offset + size) & ~(page - 1);
  if (end > start) ::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, end - start);
}

uint64_t DefaultStoreCapacity() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) * 3 / 10;
}

}  // namespace phalanx::objectstore
