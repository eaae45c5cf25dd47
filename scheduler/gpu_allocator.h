// GpuAllocator: which of the node's GPUs a lease may use. A request below 1
// shares one GPU (fractions of the same GPU add up to at most 1); a request
// of 1 or more takes that many whole, otherwise unused GPUs. The ids go to
// the worker as CUDA_VISIBLE_DEVICES. Not thread-safe; owned by the
// TaskManager on the raylet's main loop.
#pragma once

#include <optional>
#include <vector>

namespace phalanx::scheduler {

class GpuAllocator {
 public:
  explicit GpuAllocator(int num_gpus) : free_(static_cast<size_t>(num_gpus), 1.0) {}

  // GPU ids for `amount`, or nullopt if they are not free now. amount 0: {}.
  std::optional<std::vector<int>> Acquire(double amount);
  // REQUIRES: `ids` and `amount` as returned and asked by one Acquire.
  void Release(const std::vector<int>& ids, double amount);
  int size() const { return static_cast<int>(free_.size()); }

 private:
  std::vector<double> free_;  // free fraction of each GPU
};

// GPUs on this machine through the CUDA driver (libcuda.so.1, loaded at run
// time so the raylet needs no CUDA to build or start); 0 when there is none.
int DetectGpus();

}  // namespace phalanx::scheduler
