// GcsKeeper: the head node's raylet restarts the cluster's redis-server when
// it dies. phalanx.init() and `phalanx start --head` write redis-server's
// command line to the session folder (`redis.argv`, one argument per line;
// its config file holds the password, AOF persistence in the same folder,
// and `--pidfile redis.pid`) and give the head raylet --gcs-restart-file.
// When the raylet loses redis-server it calls Check() every second while it
// reconnects: if the pid in the pidfile is not alive, the keeper starts the
// same command again (same port, same data folder: the AOF brings the tables
// back), at most once every `min_gap_ms`. An external redis-server
// (--gcs-address) has no restart file: restarting it is its operator's job.
// Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/status.h"

namespace phalanx::scheduler {

class GcsKeeper {
 public:
  // `argv_file`: the command line (empty: keeps nothing; its --logfile says where it logs).
  // `tie`: the new server dies with this raylet (an embedded cluster's,
  // whose first one died with its driver); else it outlives it (the CLI's).
  GcsKeeper(std::string argv_file, std::string pid_file, bool tie, int64_t min_gap_ms = 1000)
      : argv_file_(std::move(argv_file)), pid_file_(std::move(pid_file)), tie_(tie), min_gap_ms_(min_gap_ms) {}
  bool enabled() const { return !argv_file_.empty(); }
  // Starts redis-server again if its recorded process is gone. Returns true if it did.
  bool Check();
  int restarts() const { return restarts_; }

 private:
  std::string argv_file_;
  std::string pid_file_;
  bool tie_;
  int64_t min_gap_ms_;
  std::chrono::steady_clock::time_point last_start_{};
  int restarts_ = 0;
};

}  // namespace phalanx::scheduler
