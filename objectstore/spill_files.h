// SpillFiles: the node's spilled objects, one file each in a folder of this
// raylet's (docs/fault-tolerance.md, "Spilling"). Bytes go straight from the
// shared-memory store to the file and back (pwrite/pread of 8 MiB steps at
// the object's own address: no staging buffer, whatever the object's size).
//
// Spill runs on the caller's thread (the raylet's main loop, when a create
// needs room). Restore runs on the files' own I/O thread and posts its end to
// the io_context given at construction. Everything but that thread's reads
// is called on the io_context's thread; not thread-safe otherwise.
//
// The disk is bounded twice: by `max_bytes` (0: no cap of its own) and by
// the file system, which spilling never fills past `max_disk_fraction`.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include <boost/asio/io_context.hpp>

#include "core/status.h"

namespace phalanx::objectstore {

struct SpillOptions {
  std::string dir;               // made at the first spill; emptied and removed at destruction
  uint64_t max_bytes = 0;        // 0: bounded by the disk alone
  double max_disk_fraction = 0.95;
};

struct SpillStats {
  uint64_t objects = 0;          // on disk now
  uint64_t bytes = 0;
  uint64_t spilled_objects = 0;  // since start
  uint64_t spilled_bytes = 0;
  uint64_t restored_objects = 0;
  uint64_t restored_bytes = 0;
  double spill_seconds = 0;      // time spent writing and reading, for the rates
  double restore_seconds = 0;
};

class SpillFiles {
 public:
  SpillFiles(boost::asio::io_context& io, SpillOptions options);
  ~SpillFiles();  // waits for a read in progress, then removes the folder
  SpillFiles(const SpillFiles&) = delete;
  SpillFiles& operator=(const SpillFiles&) = delete;

  // Writes `size` bytes at `data` to the file of `id`. OutOfMemory, saying
  // which limit, when the disk may not take them; Unavailable when writing fails
  // (nothing is left on disk then). `credit`: bytes of files about to go (the
  // one being read back to make room for): the limits may be passed by that
  // much meanwhile.
  Status Spill(const std::string& id, const uint8_t* data, uint64_t size, uint64_t credit = 0);
  // Reads the file of `id` into `dest` (room for its size) on the I/O
  // thread; `done` runs on the io_context. `keep` lives until the read has
  // ended (the store space being written). The file stays until Remove.
  void Restore(const std::string& id, uint8_t* dest, std::shared_ptr<const void> keep,
               std::function<void(Status)> done);
  // The same, now, on the caller's thread.
  Status RestoreNow(const std::string& id, uint8_t* dest);
  // Deletes the file of `id` (none: nothing happens).
  void Remove(const std::string& id);

  bool Has(const std::string& id) const { return files_.count(id) > 0; }
  uint64_t SizeOf(const std::string& id) const;
  SpillStats Stats() const;
  // "N MiB in K objects on disk under DIR (limit ...)", for error messages.
  std::string Describe() const;
  const std::string& dir() const { return options_.dir; }

 private:
  struct Job {
    int fd;
    uint8_t* dest;
    uint64_t size;
    std::shared_ptr<const void> keep;
    std::function<void(Status)> done;
  };
  std::string PathOf(const std::string& id) const;
  Status CheckRoom(uint64_t size, uint64_t credit) const;
  void Run();

  boost::asio::io_context& io_;
  SpillOptions options_;
  bool dir_made_ = false;
  std::unordered_map<std::string, uint64_t> files_;  // id -> size
  SpillStats stats_;
  std::shared_ptr<char> alive_ = std::make_shared<char>();  // posted completions after destruction do nothing

  std::mutex mu_;  // guards jobs_, stop_ (the I/O thread's queue)
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace phalanx::objectstore
