#include "objectstore/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (populator_.joinable()) populator_.join();
  ::munmap(base_, capacity_);
  ::close(fd_);
}

void ShmRegion::Populate(uint64_t end) {
  const uint64_t page = 4096;
  end = std::min((end + page - 1) & ~(page - 1), capacity_);
  std::lock_guard<std::mutex> lock(mu_);
  if (end <= target_) return;
  target_ = end;
  if (!populator_.joinable()) {
    populator_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (true) {
        cv_.wait(lock, [this] { return stop_ || populated_ < target_; });
        if (stop_) return;
        uint64_t from = populated_, to = std::min(target_, from + (uint64_t{2} << 20));
        lock.unlock();
        bool refused = false;
#ifdef MADV_POPULATE_WRITE
        // Kernels before 5.14 refuse the advice: the pages then come one fault at a time.
        refused = ::madvise(base_ + from, to - from, MADV_POPULATE_WRITE) != 0 && errno == EINVAL;
#else
        refused = true;
#endif
        lock.lock();
        populated_ = refused ? capacity_ : to;
        if (refused) target_ = capacity_;
      }
    });
  }
  cv_.notify_one();
}

uint64_t DefaultStoreCapacity() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) * 3 / 10;
}

}  // namespace phalanx::objectstore
