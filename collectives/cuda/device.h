// The CUDA runtime as phalanx's GPU code uses it: whether a device is here,
// device memory owned by RAII, copies and stream synchronisation, each
// returning a Status that names the CUDA error. Built only when CUDA is
// (PHALANX_HAVE_CUDA); thread-safe as the CUDA runtime is.
#pragma once

#include <cstddef>
#include <memory>

#include "core/status.h"

namespace phalanx::collectives::cuda {

// The number of usable devices, or Unavailable saying why there are none
// (no driver, no GPU): a caller turns that into a skip or a clear error.
Result<int> DeviceCount();

// Device memory on the current device, freed when this goes.
class DeviceBuffer {
 public:
  static Result<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  // Synchronous copies of `bytes` (at most size()) from or to host memory.
  Status CopyFromHost(const void* src, size_t bytes);
  Status CopyToHost(void* dst, size_t bytes) const;

 private:
  DeviceBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

// Waits for the work queued on `stream` (a cudaStream_t; null: the default stream).
Status Synchronize(void* stream);

}  // namespace phalanx::collectives::cuda
