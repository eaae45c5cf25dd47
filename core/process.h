// Starting and stopping helper processes (redis-server, raylets) from C++:
// used by the C++ API's embedded cluster and by the tests; and the small
// descriptor and socket helpers every process uses. Thread-safe.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/status.h"

namespace phalanx {

// Starts argv[0] (searched on PATH) with stdout and stderr appended to
// `log_path`. Returns the child's pid, or -1 if fork failed.
pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log_path);
// SIGTERM, then SIGKILL after `grace_ms`; reaps the child. No-op for pid <= 0.
void StopProcess(pid_t pid, int grace_ms = 2000);
// Marks `fd` close-on-exec (for descriptors opened by libraries that do not:
// Asio's sockets, hiredis). No-op for fd < 0.
void SetCloseOnExec(int fd);
// Names the calling thread (as top -H, perf and /proc/PID/task/*/comm show
// it); at most 15 characters are kept.
void NameThisThread(const char* name);
// OK if the process at the other end of Unix socket `fd` runs as this
// process's user (or root); Unavailable naming its uid and pid if not.
Status CheckPeerUser(int fd);
// Writes `bytes` to `path` (created or truncated) with permissions `mode`,
// set before anything is written (a secret is never readable by others).
Status WriteFileWithMode(const std::string& path, const std::string& bytes, mode_t mode);
// A TCP connection to host:port (a name or an address) within `timeout_ms`,
// without blocking past it: the socket, close-on-exec and non-blocking.
// Unavailable "cannot connect to HOST:PORT: why" if not.
Result<int> ConnectTcpWithin(const std::string& host, int port, int64_t timeout_ms);

}  // namespace phalanx
