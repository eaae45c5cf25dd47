// CudaDevice: a GPU as the staged path sees it (objectstore/staged_device.h):
// pinned host staging (cudaHostAlloc), copies queued on a stream of its own
// (cudaMemcpyAsync), each followed by an event that Poll queries and Wait
// synchronises. Built only with CUDA (PHALANX_HAVE_CUDA); thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "objectstore/staged_device.h"

namespace phalanx::objectstore {

class CudaDevice : public Device {
 public:
  // Device `ordinal` of this process (after CUDA_VISIBLE_DEVICES), or
  // Unavailable naming why there is none.
  static Result<std::unique_ptr<CudaDevice>> Open(int ordinal);
  ~CudaDevice() override;

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }
  Result<char*> AllocStaging(size_t bytes) override;
  void FreeStaging(char* p) override;
  Result<uint64_t> ToHost(char* dst, uint64_t src, size_t bytes) override;
  Result<uint64_t> ToDevice(uint64_t dst, const char* src, size_t bytes) override;
  Result<bool> Poll(uint64_t ticket) override;
  Status Wait(uint64_t ticket) override;

 private:
  CudaDevice(int ordinal, void* stream) : ordinal_(ordinal), stream_(stream) {}
  Result<uint64_t> Record();

  int ordinal_;
  void* stream_;                                   // cudaStream_t
  uint64_t next_ticket_ = 0;
  std::unordered_map<uint64_t, void*> events_;     // ticket -> cudaEvent_t
};

}  // namespace phalanx::objectstore
