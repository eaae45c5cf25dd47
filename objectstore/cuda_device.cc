#include "objectstore/cuda_device.h"

#include <cuda_runtime.h>

namespace phalanx::objectstore {

namespace {
Status Check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::OK();
  return Status::Internal(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
}  // namespace

Result<std::unique_ptr<CudaDevice>> CudaDevice::Open(int ordinal) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return Status::Unavailable(std::string("no CUDA device: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                               ")");
  }
  if (ordinal < 0 || ordinal >= n) {
    return Status::Unavailable("no CUDA device " + std::to_string(ordinal) + ": this process sees " +
                               std::to_string(n));
  }
  PHALANX_RETURN_IF_ERROR(Check(cudaSetDevice(ordinal), "cudaSetDevice"));
  cudaStream_t stream = nullptr;
  PHALANX_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  return std::unique_ptr<CudaDevice>(new CudaDevice(ordinal, stream));
}

CudaDevice::~CudaDevice() {
  cudaSetDevice(ordinal_);
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  for (auto& [t, ev] : events_) cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Result<char*> CudaDevice::AllocStaging(size_t bytes) {
  void* p = nullptr;
  PHALANX_RETURN_IF_ERROR(Check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc"));
  return static_cast<char*>(p);
}

void CudaDevice::FreeStaging(char* p) { cudaFreeHost(p); }

Result<uint64_t> CudaDevice::Record() {
  cudaEvent_t ev = nullptr;
  PHALANX_RETURN_IF_ERROR(Check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
  Status st = Check(cudaEventRecord(ev, static_cast<cudaStream_t>(stream_)), "cudaEventRecord");
  if (!st.ok()) {
    cudaEventDestroy(ev);
    return st;
  }
  uint64_t ticket = ++next_ticket_;
  events_[ticket] = ev;
  return ticket;
}

Result<uint64_t> CudaDevice::ToHost(char* dst, uint64_t src, size_t bytes) {
  PHALANX_RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
  PHALANX_RETURN_IF_ERROR(Check(cudaMemcpyAsync(dst, reinterpret_cast<const void*>(src), bytes, cudaMemcpyDeviceToHost,
                                                static_cast<cudaStream_t>(stream_)),
                                "cudaMemcpyAsync to the host"));
  return Record();
}

Result<uint64_t> CudaDevice::ToDevice(uint64_t dst, const char* src, size_t bytes) {
  PHALANX_RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
  PHALANX_RETURN_IF_ERROR(Check(cudaMemcpyAsync(reinterpret_cast<void*>(dst), src, bytes, cudaMemcpyHostToDevice,
                                                static_cast<cudaStream_t>(stream_)),
                                "cudaMemcpyAsync to the device"));
  return Record();
}

Result<bool> CudaDevice::Poll(uint64_t ticket) {
  auto it = events_.find(ticket);
  if (it == events_.end()) return Status::InvalidArgument("no copy " + std::to_string(ticket) + " on " + name());
  cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(it->second));
  if (e == cudaErrorNotReady) return false;
  cudaEventDestroy(static_cast<cudaEvent_t>(it->second));
  events_.erase(it);
  PHALANX_RETURN_IF_ERROR(Check(e, "copy on " + name()));
  return true;
}

Status CudaDevice::Wait(uint64_t ticket) {
  auto it = events_.find(ticket);
  if (it == events_.end()) return Status::InvalidArgument("no copy " + std::to_string(ticket) + " on " + name());
  cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(it->second));
  cudaEventDestroy(static_cast<cudaEvent_t>(it->second));
  events_.erase(it);
  return Check(e, "copy on " + name());
}

}  // namespace phalanx::objectstore
