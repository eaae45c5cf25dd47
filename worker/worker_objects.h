// WorkerObjects: what the core worker's parts (worker/direct_caller.h,
// worker/task_server.h) ask of the process's object side, implemented by the
// CoreWorker: gets and waits through the raylet, and the process's refs.
#pragma once

#include <string>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx {

class WorkerObjects {
 public:
  virtual ~WorkerObjects() = default;
  // As CoreWorker::Get and CoreWorker::Wait.
  virtual Result<std::vector<rpc::ObjectValue>> Get(const std::vector<std::string>& ids, int64_t timeout_ms,
                                                    bool locate_only) = 0;
  virtual Result<std::vector<std::string>> Wait(const std::vector<std::string>& ids, int num_returns,
                                                int64_t timeout_ms, bool fetch_local) = 0;
  // One view of a store value Get returned is over.
  virtual void Release(const std::string& id) = 0;
  virtual void AddLocalRef(const std::string& id) = 0;
  virtual void RemoveLocalRef(const std::string& id) = 0;
};

// Who this worker process is, as its raylet told it at registration.
struct WorkerIdentity {
  std::string client_id;
  std::string node_id;
  std::string session_dir;
  std::string node_address;   // where its listeners take TCP connections
  uint64_t inline_threshold = 100 * 1024;
};

}  // namespace phalanx
