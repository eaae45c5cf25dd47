#include "objectstore/staged_device.h"

#include <algorithm>
#include <cstring>

namespace phalanx::objectstore {

// ---- HostDevice ----

Result<char*> HostDevice::AllocStaging(size_t bytes) {
  char* p = new (std::nothrow) char[bytes];
  if (p == nullptr) return Status::OutOfMemory("host device: no " + std::to_string(bytes) + " bytes for staging");
  staging_.emplace_back(p, bytes);
  staging_bytes_ += bytes;
  return p;
}

void HostDevice::FreeStaging(char* p) {
  auto it = std::find_if(staging_.begin(), staging_.end(), [p](const auto& s) { return s.first == p; });
  if (it == staging_.end()) return;
  staging_bytes_ -= it->second;
  staging_.erase(it);
  delete[] p;
}

Result<uint64_t> HostDevice::ToHost(char* dst, uint64_t src, size_t bytes) {
  uint64_t ticket = ++copies_;
  in_flight_.push_back({ticket, Copy{dst, reinterpret_cast<const char*>(src), bytes, polls_to_finish_,
                                     fail_at_ != 0 && ticket == fail_at_}});
  max_in_flight_ = std::max(max_in_flight_, in_flight_.size());
  return ticket;
}

Result<uint64_t> HostDevice::ToDevice(uint64_t dst, const char* src, size_t bytes) {
  uint64_t ticket = ++copies_;
  in_flight_.push_back(
      {ticket, Copy{reinterpret_cast<char*>(dst), src, bytes, polls_to_finish_, fail_at_ != 0 && ticket == fail_at_}});
  max_in_flight_ = std::max(max_in_flight_, in_flight_.size());
  return ticket;
}

Status HostDevice::Finish(uint64_t ticket) {
  auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [ticket](const auto& c) { return c.first == ticket; });
  if (it == in_flight_.end()) return Status::InvalidArgument("host device: no copy " + std::to_string(ticket));
  Copy c = it->second;
  in_flight_.erase(it);
  if (c.fail) return Status::Internal("host device: copy " + std::to_string(ticket) + " failed (injected)");
  std::memcpy(c.dst, c.src, c.bytes);
  return Status::OK();
}

Result<bool> HostDevice::Poll(uint64_t ticket) {
  auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [ticket](const auto& c) { return c.first == ticket; });
  if (it == in_flight_.end()) return Status::InvalidArgument("host device: no copy " + std::to_string(ticket));
  if (it->second.polls_left-- > 0) return false;
  PHALANX_RETURN_IF_ERROR(Finish(ticket));
  return true;
}

Status HostDevice::Wait(uint64_t ticket) { return Finish(ticket); }

// ---- staging slots ----

StagingSlots::~StagingSlots() {
  for (char* s : slots_) device_->FreeStaging(s);
}

Status StagingSlots::AllocateSlots() {
  if (options_.slots < 1 || options_.slot_bytes == 0) {
    return Status::InvalidArgument("staging needs at least one slot of some bytes");
  }
  for (int i = 0; i < options_.slots; ++i) {
    auto p = device_->AllocStaging(options_.slot_bytes);
    if (!p.ok()) return Status(p.status().code(), "staging for " + device_->name() + ": " + p.status().message());
    slots_.push_back(p.value());
    free_.push_back(options_.slots - 1 - i);  // slot 0 first
  }
  return Status::OK();
}

Status StagingSlots::CheckRange(uint64_t offset, uint64_t length, const char* what) const {
  if (offset > size_ || length > size_ - offset) {
    return Status::InvalidArgument(std::string("range past the end of the ") + what);
  }
  if (length > options_.slot_bytes) {
    return Status::InvalidArgument("range of " + std::to_string(length) + " bytes is larger than a staging slot (" +
                                   std::to_string(options_.slot_bytes) + ")");
  }
  return Status::OK();
}

int StagingSlots::TakeSlot() {
  int slot = free_.back();
  free_.pop_back();
  max_used_ = std::max<int>(max_used_, static_cast<int>(slots_.size() - free_.size()));
  return slot;
}

void StagingSlots::PollSoon(bool busy) {
  if (polling_ || !busy) return;
  polling_ = true;
  timer_.expires_after(options_.poll);
  std::weak_ptr<StagingSlots> weak = shared_from_this();
  timer_.async_wait([weak](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!self || ec) return;
    self->polling_ = false;
    self->PollCopies();
  });
}

// ---- StagedSource ----

Result<std::shared_ptr<StagedSource>> StagedSource::Make(boost::asio::io_context& io, Device* device, uint64_t addr,
                                                         uint64_t size, StagingOptions options) {
  return MakeWithSlots<StagedSource>(io, device, addr, size, options);
}

StagedSource::~StagedSource() {
  for (auto& c : copying_) (void)device_->Wait(c.ticket);  // (its slot's memory goes next)
}

void StagedSource::Read(uint64_t offset, uint64_t length, ObjectTransfer::RangeDone done) {
  Status ok = CheckRange(offset, length, "device object");
  if (!ok.ok()) return done(ok, nullptr, 0, nullptr);
  queue_.push_back(Pending{offset, length, std::move(done)});
  Start();
}

void StagedSource::Start() {
  while (!queue_.empty() && HasFreeSlot()) {
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    int slot = TakeSlot();
    auto ticket = device_->ToHost(slots_[slot], addr_ + p.offset, p.length);
    if (!ticket.ok()) {
      GiveSlot(slot);
      p.done(Named(ticket.status()), nullptr, 0, nullptr);
      continue;
    }
    copying_.push_back(Copying{ticket.value(), slot, p.length, std::move(p.done)});
  }
  PollSoon(!copying_.empty());
}

void StagedSource::Release(int slot) {
  GiveSlot(slot);
  Start();
}

void StagedSource::PollCopies() {
  auto self = std::static_pointer_cast<StagedSource>(shared_from_this());  // (a done callback may drop the rest)
  for (size_t i = 0; i < copying_.size();) {
    auto st = device_->Poll(copying_[i].ticket);
    if (st.ok() && !st.value()) {
      ++i;
      continue;
    }
    Copying c = std::move(copying_[i]);
    copying_.erase(copying_.begin() + static_cast<std::ptrdiff_t>(i));
    if (!st.ok()) {
      GiveSlot(c.slot);
      c.done(Named(st.status()), nullptr, 0, nullptr);
      continue;
    }
    // The slot stays taken until the reply that points into it is written.
    std::weak_ptr<StagedSource> weak = self;
    int slot = c.slot;
    std::shared_ptr<const void> keep(slots_[slot], [weak, slot](const void*) {
      if (auto s = weak.lock()) s->Release(slot);
    });
    c.done(Status::OK(), slots_[slot], c.length, std::move(keep));
  }
  Start();
}

// ---- StagedSink ----

Result<std::shared_ptr<StagedSink>> StagedSink::Make(boost::asio::io_context& io, Device* device, uint64_t addr,
                                                     uint64_t size, StagingOptions options) {
  return MakeWithSlots<StagedSink>(io, device, addr, size, options);
}

StagedSink::~StagedSink() {
  for (auto& c : copying_) (void)device_->Wait(c.ticket);
}

Status StagedSink::Retire(size_t index, const Status& st) {
  GiveSlot(copying_[index].slot);
  copying_.erase(copying_.begin() + static_cast<std::ptrdiff_t>(index));
  if (!st.ok() && error_.ok()) error_ = Named(st);
  return error_;
}

Status StagedSink::Write(uint64_t offset, const char* data, size_t len) {
  if (!error_.ok()) return error_;
  PHALANX_RETURN_IF_ERROR(CheckRange(offset, len, "device buffer"));
  if (!HasFreeSlot()) {  // every slot busy: the oldest copy is the first to end
    Status st = device_->Wait(copying_.front().ticket);
    PHALANX_RETURN_IF_ERROR(Retire(0, st));
  }
  int slot = TakeSlot();
  std::memcpy(slots_[slot], data, len);
  auto ticket = device_->ToDevice(addr_ + offset, slots_[slot], len);
  if (!ticket.ok()) {
    GiveSlot(slot);
    error_ = Named(ticket.status());
    return error_;
  }
  copying_.push_back(Copying{ticket.value(), slot});
  PollSoon(true);
  return Status::OK();
}

void StagedSink::Drain(std::function<void(const Status&)> done) {
  drains_.push_back(std::move(done));
  PollCopies();
}

void StagedSink::PollCopies() {
  auto self = shared_from_this();  // (a drain callback may drop the rest)
  for (size_t i = 0; i < copying_.size();) {
    auto st = device_->Poll(copying_[i].ticket);
    if (st.ok() && !st.value()) {
      ++i;
      continue;
    }
    (void)Retire(i, st.ok() ? Status::OK() : st.status());
  }
  if (copying_.empty() || !error_.ok()) {
    auto drains = std::move(drains_);
    drains_.clear();
    for (auto& d : drains) d(error_);
  }
  PollSoon(!copying_.empty());
}

}  // namespace phalanx::objectstore
