#include "scheduler/gpu_allocator.h"

#include <dlfcn.h>

#include <cmath>

namespace phalanx::scheduler {

namespace {
constexpr double kEps = 1e-9;
}

std::optional<std::vector<int>> GpuAllocator::Acquire(double amount) {
  if (amount <= kEps) return std::vector<int>{};
  if (amount < 1.0) {
    // Pack fractions: the busiest GPU that still has room.
    int best = -1;
    for (int i = 0; i < size(); ++i) {
      if (free_[i] + kEps >= amount && (best < 0 || free_[i] < free_[best])) best = i;
    }
    if (best < 0) return std::nullopt;
    free_[best] -= amount;
    return std::vector<int>{best};
  }
  int whole = static_cast<int>(std::ceil(amount - kEps));
  std::vector<int> ids;
  for (int i = 0; i < size() && static_cast<int>(ids.size()) < whole; ++i) {
    if (free_[i] >= 1.0 - kEps) ids.push_back(i);
  }
  if (static_cast<int>(ids.size()) < whole) return std::nullopt;
  for (int i : ids) free_[i] = 0.0;
  return ids;
}

void GpuAllocator::Release(const std::vector<int>& ids, double amount) {
  if (ids.empty()) return;
  if (amount < 1.0) {
    free_[ids[0]] = std::min(1.0, free_[ids[0]] + amount);
    return;
  }
  for (int i : ids) free_[i] = 1.0;
}

int DetectGpus() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return 0;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  if (init == nullptr || count == nullptr || init(0) != 0 || count(&n) != 0) n = 0;
  ::dlclose(lib);
  return n;
}

}  // namespace phalanx::scheduler
