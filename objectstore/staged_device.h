// Device memory moved between nodes through host staging, chunk by chunk:
// device -> staging buffer -> the wire -> staging buffer -> device, each
// chunk's copies overlapping the others' (the pull's window of requests in
// flight), never the whole object staged at once.
//
//   - Device: what the staged path needs of a device: host staging memory it
//     copies to and from at full speed (pinned memory for CUDA), and
//     asynchronous copies polled for completion. CudaDevice
//     (objectstore/cuda_device.h, built with CUDA) is a GPU; HostDevice is
//     host memory standing in for one, so the staged path is tested
//     without a GPU, its copies finishing late or failing on demand.
//   - StagedSource serves ranges of a device buffer (ObjectTransfer::ServeFrom):
//     each range is copied into a free staging slot and sent from there; the
//     slot is free again once the reply frame has been written.
//   - StagedSink writes arriving ranges into a device buffer
//     (ObjectTransfer::PullChunks): each is copied into a staging slot and
//     from there to the device; Drain reports when every copy is done.
//
// Slots bound the host memory used: `slots` x `slot_bytes` per copy, whatever
// the object's size. Not thread-safe; lives on one loop.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "core/status.h"
#include "objectstore/object_transfer.h"

namespace phalanx::objectstore {

class Device {
 public:
  virtual ~Device() = default;
  // As a user names it: "cuda:0"; "host" for HostDevice.
  virtual std::string name() const = 0;
  // Host memory the device copies to and from at full speed (pinned for CUDA).
  virtual Result<char*> AllocStaging(size_t bytes) = 0;
  virtual void FreeStaging(char* p) = 0;
  // Start copying `bytes` from device address `src` to host `dst` (ToHost)
  // or from host `src` to device address `dst` (ToDevice); the ticket is
  // polled with Poll. The host memory stays untouched by the caller until
  // the copy finished.
  virtual Result<uint64_t> ToHost(char* dst, uint64_t src, size_t bytes) = 0;
  virtual Result<uint64_t> ToDevice(uint64_t dst, const char* src, size_t bytes) = 0;
  // Whether copy `ticket` finished; its error if it failed (the ticket is
  // spent once Poll returned true or an error, or Wait returned).
  virtual Result<bool> Poll(uint64_t ticket) = 0;
  // Blocks until copy `ticket` finished.
  virtual Status Wait(uint64_t ticket) = 0;
};

// Host memory standing in for a device: device addresses are host pointers.
// A copy is done after `polls_to_finish` polls (a slow device), and copy
// number `fail_at` (1-based; 0: none) fails, naming itself.
class HostDevice : public Device {
 public:
  explicit HostDevice(int polls_to_finish = 0, uint64_t fail_at = 0)
      : polls_to_finish_(polls_to_finish), fail_at_(fail_at) {}
  std::string name() const override { return "host"; }
  Result<char*> AllocStaging(size_t bytes) override;
  void FreeStaging(char* p) override;
  Result<uint64_t> ToHost(char* dst, uint64_t src, size_t bytes) override;
  Result<uint64_t> ToDevice(uint64_t dst, const char* src, size_t bytes) override;
  Result<bool> Poll(uint64_t ticket) override;
  Status Wait(uint64_t ticket) override;

  uint64_t copies() const { return copies_; }
  size_t staging_bytes() const { return staging_bytes_; }       // allocated now
  size_t max_in_flight() const { return max_in_flight_; }       // most copies unfinished at once

 private:
  struct Copy {
    char* dst;
    const char* src;
    size_t bytes;
    int polls_left;
    bool fail;
  };
  Status Finish(uint64_t ticket);
  int polls_to_finish_;
  uint64_t fail_at_;
  uint64_t copies_ = 0;
  size_t staging_bytes_ = 0;
  size_t max_in_flight_ = 0;
  std::vector<std::pair<uint64_t, Copy>> in_flight_;
  std::vector<std::pair<char*, size_t>> staging_;
};

struct StagingOptions {
  int slots = 4;                      // staging buffers per copy
  size_t slot_bytes = 256 << 10;      // at least the transfer's chunk_bytes
  std::chrono::microseconds poll{50};  // how often unfinished copies are polled
};

// What a StagedSource and a StagedSink share: the device, its buffer, the
// ring of staging slots and the timer that polls unfinished copies.
class StagingSlots : public std::enable_shared_from_this<StagingSlots> {
 public:
  virtual ~StagingSlots();
  // The most slots in use at once so far.
  int max_slots_used() const { return max_used_; }

 protected:
  StagingSlots(boost::asio::io_context& io, Device* device, uint64_t addr, uint64_t size, StagingOptions options)
      : device_(device), addr_(addr), size_(size), options_(options), timer_(io) {}
  // A T (StagedSource or StagedSink) with its slots allocated, or why not
  // (InvalidArgument for no slot, the device's error).
  template <class T>
  static Result<std::shared_ptr<T>> MakeWithSlots(boost::asio::io_context& io, Device* device, uint64_t addr,
                                                  uint64_t size, StagingOptions options) {
    std::shared_ptr<T> s(new T(io, device, addr, size, options));
    PHALANX_RETURN_IF_ERROR(s->AllocateSlots());
    return s;
  }
  Status AllocateSlots();
  // Whether `length` bytes at `offset` fit the buffer and a slot (else why not).
  Status CheckRange(uint64_t offset, uint64_t length, const char* what) const;
  bool HasFreeSlot() const { return !free_.empty(); }
  int TakeSlot();
  void GiveSlot(int slot) { free_.push_back(slot); }
  // The device's error, named by the device.
  Status Named(const Status& st) const { return Status(st.code(), device_->name() + ": " + st.message()); }
  // PollCopies after options.poll, unless a poll is due already or `busy` is false.
  void PollSoon(bool busy);
  virtual void PollCopies() = 0;

  Device* device_;
  uint64_t addr_;
  uint64_t size_;
  StagingOptions options_;
  std::vector<char*> slots_;

 private:
  std::vector<int> free_;
  boost::asio::steady_timer timer_;
  bool polling_ = false;
  int max_used_ = 0;
};

class StagedSource : public StagingSlots {
 public:
  // Serves `size` bytes at device address `addr` of `device` (which outlives this).
  static Result<std::shared_ptr<StagedSource>> Make(boost::asio::io_context& io, Device* device, uint64_t addr,
                                                    uint64_t size, StagingOptions options = {});
  ~StagedSource() override;
  // An ObjectTransfer::RangeSource: reads [offset, offset + length) into a
  // staging slot (waiting for one when all are busy) and answers `done` with
  // it; the slot is free again when the `keep` handed out goes.
  void Read(uint64_t offset, uint64_t length, ObjectTransfer::RangeDone done);
  uint64_t size() const { return size_; }

 private:
  friend class StagingSlots;  // (MakeWithSlots)
  using StagingSlots::StagingSlots;
  struct Pending {
    uint64_t offset;
    uint64_t length;
    ObjectTransfer::RangeDone done;
  };
  struct Copying {
    uint64_t ticket;
    int slot;
    uint64_t length;
    ObjectTransfer::RangeDone done;
  };
  void Start();
  void Release(int slot);
  void PollCopies() override;

  std::deque<Pending> queue_;
  std::vector<Copying> copying_;
};

class StagedSink : public StagingSlots {
 public:
  // Writes `size` bytes to device address `addr` of `device` (which outlives this).
  static Result<std::shared_ptr<StagedSink>> Make(boost::asio::io_context& io, Device* device, uint64_t addr,
                                                  uint64_t size, StagingOptions options = {});
  ~StagedSink() override;
  // An ObjectTransfer::ChunkWriter: copies the range into a staging slot and
  // starts its copy to the device. With every slot busy it first waits for
  // the oldest copy (a device copy of one chunk: microseconds on a GPU).
  Status Write(uint64_t offset, const char* data, size_t len);
  // `done` runs once every copy started has finished, with the first error.
  void Drain(std::function<void(const Status&)> done);

 private:
  friend class StagingSlots;  // (MakeWithSlots)
  using StagingSlots::StagingSlots;
  struct Copying {
    uint64_t ticket;
    int slot;
  };
  void PollCopies() override;
  Status Retire(size_t index, const Status& st);

  std::deque<Copying> copying_;  // oldest first
  Status error_;
  std::vector<std::function<void(const Status&)>> drains_;
};

}  // namespace phalanx::objectstore
