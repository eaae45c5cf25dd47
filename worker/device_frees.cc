#include "worker/device_frees.h"

#include <algorithm>

namespace phalanx {

void DeviceFrees::Add(const rpc::ObjectIds& m) {
  {
    std::lock_guard<std::mutex> l(mu_);
    freed_.insert(freed_.end(), m.object_ids().begin(), m.object_ids().end());
  }
  cv_.notify_all();
}

std::vector<std::string> DeviceFrees::Take(Deadline deadline, const Pump& pump) {
  std::unique_lock<std::mutex> l(mu_);
  while (freed_.empty() && !stopped_ && Clock::now() < deadline) {
    // Read the connection for a while (at once back if another thread reads:
    // that one passes the frees on), then wait for them briefly.
    l.unlock();
    pump(std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
    l.lock();
    if (freed_.empty() && !stopped_) {
      cv_.wait_until(l, std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
    }
  }
  std::vector<std::string> out;
  out.swap(freed_);
  return out;
}

void DeviceFrees::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

}  // namespace phalanx
