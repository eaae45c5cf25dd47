// ShmPipe: a one-way byte stream between two processes of one node, in
// shared memory: the two ranks of a static group on one node send their
// frames through a pair of these instead of through their Unix socket
// (worker/group_socket.h), one copy in and one out, no system call while
// both are awake. The socket stays, for what shared memory cannot say:
// "wake up" (a doorbell byte, written only when the other side said it is
// going to sleep) and "gone" (it closes when the process exits).
//
// A pair lives in one memfd made by one end (CreatePair), passed to the
// other over their Unix socket (SCM_RIGHTS) and mapped there (MapPair); each
// end writes one pipe and reads the other. Counters are totals of bytes
// written (head) and read (tail), as atomics in the mapping; the other end
// is a process of this user and cluster, but what it writes is checked
// anyway: counters that say more than the pipe holds end the stream with an
// error, never a read outside the mapping.
// Single producer, single consumer; not thread-safe otherwise.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"

namespace phalanx {

class ShmPipe {
 public:
  // Bytes one pipe holds: a power of two in [kMinCapacity, kMaxCapacity],
  // chosen by the end that creates the pair.
  static constexpr size_t kMinCapacity = 1 << 20;
  static constexpr size_t kMaxCapacity = 16 << 20;

  struct Pair {
    std::unique_ptr<ShmPipe> out;  // this end writes
    std::unique_ptr<ShmPipe> in;   // this end reads
  };
  // A new pair in a memfd (returned in *fd, for the other end; the caller
  // closes it once it is passed), each pipe holding `capacity` bytes
  // (rounded down to a power of two within the bounds).
  static Result<Pair> CreatePair(int* fd, size_t capacity = kMinCapacity);
  // The pair in memfd `fd` made by the other end (its `out` is this end's
  // `in`). InvalidArgument if `fd` is not the size of a pair.
  static Result<Pair> MapPair(int fd);
  size_t capacity() const { return capacity_; }
  ~ShmPipe();
  ShmPipe(const ShmPipe&) = delete;
  ShmPipe& operator=(const ShmPipe&) = delete;

  // Writer: copies up to `n` bytes in (as many as there is room for);
  // returns how many. Error if the counters are corrupt.
  Result<size_t> Put(const char* data, size_t n);
  // Reader: copies up to `want` bytes out; returns how many (0: empty).
  Result<size_t> Get(char* into, size_t want);
  bool readable() const;  // bytes to read
  size_t available() const;  // how many (at most the capacity)
  bool writable() const;  // room to write

  // Sleeping without losing a wake-up: an end about to sleep sets its flag,
  // then looks at the pipe again (readable/writable) before it sleeps; the
  // other end, after it moved bytes, takes the flag (clearing it) and rings
  // the doorbell if it was set.
  void set_reader_sleeping(bool v);
  void set_writer_sleeping(bool v);
  bool TakeReaderSleeping();
  bool TakeWriterSleeping();

 private:
  struct Header;
  static Result<Pair> Pipes(int fd, size_t capacity, bool creator);
  ShmPipe(std::shared_ptr<void> mapping, char* at, size_t capacity);

  std::shared_ptr<void> mapping_;  // the pair's mapping, shared by its two pipes
  Header* h_;
  char* data_;
  size_t capacity_;
  // This end's own counter (the writer's head, the reader's tail), kept
  // here: only the other end's is read from the mapping.
  uint64_t own_ = 0;
};

}  // namespace phalanx
