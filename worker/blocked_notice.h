// Tells the raylet when this worker's task sleeps in a get for results that come
// to the worker itself (its direct actor calls'), so that the raylet lends the
// task's CPUs meanwhile, as it does for a get it answers (Ray's "blocked worker").
// Outermost sleep only: several threads waiting at once send one pair.
#pragma once

#include <mutex>

#include "core/proto/phalanx.pb.h"
#include "worker/raylet_channel.h"
#include "worker/ref_counter.h"

namespace phalanx {

class BlockedNotice : public DirectWaitObserver {
 public:
  explicit BlockedNotice(RayletChannel* channel) : channel_(channel) {}

  void Sleeping() override {
    std::lock_guard<std::mutex> l(mu_);
    if (sleepers_++ == 0) (void)channel_->SendNow(rpc::WORKER_BLOCKED, rpc::Empty());
  }
  void Awake() override {
    std::lock_guard<std::mutex> l(mu_);
    if (--sleepers_ == 0) (void)channel_->Send(rpc::WORKER_UNBLOCKED, rpc::Empty());
  }

 private:
  RayletChannel* const channel_;
  std::mutex mu_;
  int sleepers_ = 0;  // guarded by mu_
};

}  // namespace phalanx
