#include "collectives/cuda/device.h"

#include <cuda_runtime.h>

#include <string>

namespace phalanx::collectives::cuda {

namespace {
Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::OK();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
}  // namespace

Result<int> DeviceCount() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return Status::Unavailable(std::string("no CUDA device: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                               ")");
  }
  if (n == 0) return Status::Unavailable("no CUDA device: the driver sees none");
  return n;
}

Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::Allocate(size_t bytes) {
  void* p = nullptr;
  PHALANX_RETURN_IF_ERROR(Check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc"));
  return std::unique_ptr<DeviceBuffer>(new DeviceBuffer(p, bytes));
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes) {
  if (bytes > size_) return Status::InvalidArgument("copy of " + std::to_string(bytes) + " bytes into a device buffer of " + std::to_string(size_));
  return Check(cudaMemcpy(data_, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

Status DeviceBuffer::CopyToHost(void* dst, size_t bytes) const {
  if (bytes > size_) return Status::InvalidArgument("copy of " + std::to_string(bytes) + " bytes out of a device buffer of " + std::to_string(size_));
  return Check(cudaMemcpy(dst, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

Status Synchronize(void* stream) {
  return Check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

}  // namespace phalanx::collectives::cuda
