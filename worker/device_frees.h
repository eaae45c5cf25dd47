// DeviceFrees: the GPU objects this process keeps on its GPU that the raylet
// has freed (DEVICE_OBJECTS_FREED, scheduler/device_holders.h), waiting for
// the process's holder (python/phalanx/_private/gpu_objects.py) to let their
// GPU memory go. The core worker's push filter adds them as they are read;
// the holder's thread takes them, reading the raylet's connection itself
// while no other thread does (an idle process frees too). Thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/blocking_connection.h"
#include "core/proto/phalanx.pb.h"

namespace phalanx {

class DeviceFrees {
 public:
  // Reads what the raylet sent, until a deadline (BlockingConnection::Pump).
  using Pump = std::function<void(Deadline)>;

  // From the push filter, under the connection's lock: never waits.
  void Add(const rpc::ObjectIds& m);
  // Every id freed and not yet taken, once there is one, or none at
  // `deadline` (or after Stop).
  std::vector<std::string> Take(Deadline deadline, const Pump& pump);
  // Wakes and ends every Take (the process is shutting down).
  void Stop();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> freed_;  // guarded by mu_
  bool stopped_ = false;            // guarded by mu_
};

}  // namespace phalanx
