// OutputRelay: what workers' tasks and actors print, on its way to the
// driver of their job (Ray's log_to_driver). A worker sends each batch of
// whole lines it wrote to sys.stdout or sys.stderr (WORKER_OUTPUT, tagged
// with the job and the function or actor class); the relay adds what it
// knows itself (the worker's pid from its registration, this node's
// address), and appends the batch to the job's stream in the GCS, where the
// driver reads it wherever it runs (python/phalanx/_private/log_stream.py).
// Sizes are bounded here, whatever a worker sends. Not thread-safe; lives on
// the raylet's loop.
#pragma once

#include <string>

#include "gcs/gcs_client.h"
#include "scheduler/router.h"

namespace phalanx::scheduler {

class OutputRelay {
 public:
  // `gcs` outlives this; `node_ip` is this node's address as the driver shows it.
  OutputRelay(GcsClient* gcs, std::string node_ip) : gcs_(gcs), node_ip_(std::move(node_ip)) {}

  // Its client message: WORKER_OUTPUT (from workers only; from a driver it is dropped).
  void AddRoutes(Router& router);

  // What one message may carry; longer fields make the message malformed.
  static constexpr size_t kMaxJobId = 64;
  static constexpr size_t kMaxSource = 256;
  static constexpr size_t kMaxText = 60 * 1024;  // (the frame's limit is 64 KiB)

 private:
  GcsClient* gcs_;
  std::string node_ip_;
};

}  // namespace phalanx::scheduler
