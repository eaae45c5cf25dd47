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
constexpr size_t kPipeBytes = kHeaderBytes + ShmPipe::kCapacity;
constexpr size_t kPairBytes = 2 * kPipeBytes;
static_assert((ShmPipe::kCapacity & (ShmPipe::kCapacity - 1)) == 0, "a power of two: offsets are masks");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters shared between processes");

Status Corrupt() { return Status::Unavailable("the shared-memory pipe's counters are corrupt"); }
}  // namespace

ShmPipe::ShmPipe(std::shared_ptr<void> mapping, char* at)
    : mapping_(std::move(mapping)), h_(reinterpret_cast<Header*>(at)), data_(at + kHeaderBytes) {}

ShmPipe::~ShmPipe() = default;

Result<ShmPipe::Pair> ShmPipe::CreatePair(int* fd) {
  int f = ::memfd_create("phalanx-group-pipe", MFD_CLOEXEC);
  if (f < 0) return Status::Unavailable(std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(f, kPairBytes) != 0) {
    Status st = Status::Unavailable(std::string("ftruncate of a group pipe: ") + std::strerror(errno));
    ::close(f);
    return st;
  }
  auto pair = Pipes(f, true);
  if (!pair.ok()) {
    ::close(f);
    return pair.status();
  }
  *fd = f;
  return pair;
}

Result<ShmPipe::Pair> ShmPipe::MapPair(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != kPairBytes) {
    return Status::InvalidArgument("the shared memory passed for a group pipe is not a pipe pair's size");
  }
  return Pipes(fd, false);
}

Result<ShmPipe::Pair> ShmPipe::Pipes(int fd, bool creator) {
  void* p = ::mmap(nullptr, kPairBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Unavailable(std::string("mmap of a group pipe: ") + std::strerror(errno));
  std::shared_ptr<void> mapping(p, [](void* m) { ::munmap(m, kPairBytes); });
  char* base = static_cast<char*>(p);
  // The creator writes the first pipe and reads the second.
  Pair pair;
  pair.out.reset(new ShmPipe(mapping, base + (creator ? 0 : kPipeBytes)));
  pair.in.reset(new ShmPipe(mapping, base + (creator ? kPipeBytes : 0)));
  return pair;
}

Result<size_t> ShmPipe::Put(const char* data, size_t n) {
  const uint64_t used = own_ - h_->tail.load(std::memory_order_acquire);
  if (used > kCapacity) return Corrupt();
  const size_t k = std::min<size_t>(n, kCapacity - used);
  if (k == 0) return size_t{0};
  const size_t off = own_ & (kCapacity - 1);
  const size_t first = std::min(k, kCapacity - off);
  std::memcpy(data_ + off, data, first);
  std::memcpy(data_, data + first, k - first);
  own_ += k;
  h_->head.store(own_, std::memory_order_seq_cst);
  return k;
}

Result<size_t> ShmPipe::Get(char* into, size_t want) {
  const uint64_t avail = h_->head.load(std::memory_order_acquire) - own_;
  if (avail > kCapacity) return Corrupt();
  const size_t k = std::min<size_t>(want, avail);
  if (k == 0) return size_t{0};
  const size_t off = own_ & (kCapacity - 1);
  const size_t first = std::min(k, kCapacity - off);
  std::memcpy(into, data_ + off, first);
  std::memcpy(into + first, data_, k - first);
  own_ += k;
  h_->tail.store(own_, std::memory_order_seq_cst);
  return k;
}

bool ShmPipe::readable() const { return h_->head.load(std::memory_order_seq_cst) != own_; }
bool ShmPipe::writable() const { return own_ - h_->tail.load(std::memory_order_seq_cst) < kCapacity; }

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
