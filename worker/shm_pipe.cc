#include "worker/shm_pipe.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace phalanx {

struct ShmPipe::Header {
  alignas(64) std::atomic<uint64_t> head;  // bytes written, ever
  alignas(64) std::atomic<uint64_t> tail;  // bytes read, ever
  alignas(64) std::atomic<uint32_t> reader_sleeping;
  std::atomic<uint32_t> writer_sleeping;
};

namespace {
constexpr size_t kHeaderBytes = 4096;  // (the data starts on a page of its own)
size_t PairBytes(size_t capacity) { return 2 * (kHeaderBytes + capacity); }
static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters shared between processes");

Status Corrupt() { return Status::Unavailable("the shared-memory pipe's counters are corrupt"); }
}  // namespace

ShmPipe::ShmPipe(std::shared_ptr<void> mapping, char* at, size_t capacity)
    : mapping_(std::move(mapping)), h_(reinterpret_cast<Header*>(at)), data_(at + kHeaderBytes), capacity_(capacity) {}

ShmPipe::~ShmPipe() = default;

Result<ShmPipe::Pair> ShmPipe::CreatePair(int* fd, size_t capacity) {
  size_t cap = kMinCapacity;
  while (cap * 2 <= std::min(capacity, kMaxCapacity)) cap *= 2;
  int f = ::memfd_create("phalanx-group-pipe", MFD_CLOEXEC);
  if (f < 0) return Status::Unavailable(std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(f, PairBytes(cap)) != 0) {
    Status st = Status::Unavailable(std::string("ftruncate of a group pipe: ") + std::strerror(errno));
    ::close(f);
    return st;
  }
  auto pair = Pipes(f, cap, true);
  if (!pair.ok()) {
    ::close(f);
    return pair.status();
  }
  *fd = f;
  return pair;
}

Result<ShmPipe::Pair> ShmPipe::MapPair(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::InvalidArgument("the shared memory passed for a group pipe has no size");
  for (size_t cap = kMinCapacity; cap <= kMaxCapacity; cap *= 2) {
    if (static_cast<size_t>(st.st_size) == PairBytes(cap)) return Pipes(fd, cap, false);
  }
  return Status::InvalidArgument("the shared memory passed for a group pipe is not the size of a pipe pair (" +
                                 std::to_string(st.st_size) + " bytes)");
}

Result<ShmPipe::Pair> ShmPipe::Pipes(int fd, size_t capacity, bool creator) {
  const size_t bytes = PairBytes(capacity);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Unavailable(std::string("mmap of a group pipe: ") + std::strerror(errno));
  std::shared_ptr<void> mapping(p, [bytes](void* m) { ::munmap(m, bytes); });
  char* base = static_cast<char*>(p);
  // The creator writes the first pipe and reads the second.
  const size_t pipe = kHeaderBytes + capacity;
  Pair pair;
  pair.out.reset(new ShmPipe(mapping, base + (creator ? 0 : pipe), capacity));
  pair.in.reset(new ShmPipe(mapping, base + (creator ? pipe : 0), capacity));
  return pair;
}

Result<size_t> ShmPipe::Put(const char* data, size_t n) {
  const uint64_t used = own_ - h_->tail.load(std::memory_order_acquire);
  if (used > capacity_) return Corrupt();
  const size_t k = std::min<size_t>(n, capacity_ - used);
  if (k == 0) return size_t{0};
  const size_t off = own_ & (capacity_ - 1);
  const size_t first = std::min(k, capacity_ - off);
  std::memcpy(data_ + off, data, first);
  std::memcpy(data_, data + first, k - first);
  own_ += k;
  h_->head.store(own_, std::memory_order_seq_cst);
  return k;
}

Result<size_t> ShmPipe::Get(char* into, size_t want) {
  const uint64_t avail = h_->head.load(std::memory_order_acquire) - own_;
  if (avail > capacity_) return Corrupt();
  const size_t k = std::min<size_t>(want, avail);
  if (k == 0) return size_t{0};
  const size_t off = own_ & (capacity_ - 1);
  const size_t first = std::min(k, capacity_ - off);
  std::memcpy(into, data_ + off, first);
  std::memcpy(into + first, data_, k - first);
  own_ += k;
  h_->tail.store(own_, std::memory_order_seq_cst);
  return k;
}

size_t ShmPipe::available() const {
  return std::min<uint64_t>(h_->head.load(std::memory_order_acquire) - own_, capacity_);
}
bool ShmPipe::readable() const { return h_->head.load(std::memory_order_seq_cst) != own_; }
bool ShmPipe::writable() const { return own_ - h_->tail.load(std::memory_order_seq_cst) < capacity_; }

void ShmPipe::set_reader_sleeping(bool v) { h_->reader_sleeping.store(v ? 1 : 0, std::memory_order_seq_cst); }
void ShmPipe::set_writer_sleeping(bool v) { h_->writer_sleeping.store(v ? 1 : 0, std::memory_order_seq_cst); }
bool ShmPipe::TakeReaderSleeping() {
  return h_->reader_sleeping.load(std::memory_order_seq_cst) != 0 &&
         h_->reader_sleeping.exchange(0, std::memory_order_seq_cst) != 0;
}
bool ShmPipe::TakeWriterSleeping() {
  return h_->writer_sleeping.load(std::memory_order_seq_cst) != 0 &&
         h_->writer_sleeping.exchange(0, std::memory_order_seq_cst) != 0;
}

}  // namespace phalanx
