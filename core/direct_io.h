// DirectIo: the sockets between a caller and an actor's worker, which carry
// method calls straight to the actor without passing through a raylet.
//
// One thread polls every socket of the process (listeners, accepted and
// connected ones) and hands the whole frames each read brings to `on_frames`
// (a batch, so the handler takes its locks once per batch), on that thread;
// a closed or failed socket is reported once to `on_close`. Writes never
// block: the calling thread writes what the socket takes, the rest waits in
// the socket's queue for the poll thread (POLLOUT), so two processes that
// write to each other faster than they read cannot wedge each other. TCP
// sockets use TCP_NODELAY and keepalive probes, so a peer whose machine
// vanishes is noticed within seconds instead of never.
// Idle, the thread sleeps in poll(): no CPU.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/blocking_connection.h"
#include "core/status.h"

namespace phalanx {

class DirectIo {
 public:
  using FrameHandler = std::function<void(uint64_t conn, std::vector<Frame>& frames)>;
  using CloseHandler = std::function<void(uint64_t conn, const Status& why)>;

  DirectIo(FrameHandler on_frames, CloseHandler on_close);
  ~DirectIo();  // closes every socket (without calling on_close) and joins the thread

  // Listens; accepted sockets get ids of their own and report through the handlers.
  Status ListenUnix(const std::string& path);
  // Listens on `host` with a port the kernel picks; returns the port.
  Result<int> ListenTcp(const std::string& host);
  // Connects and returns the socket's id. `peer` names it in errors.
  Result<uint64_t> ConnectUnix(const std::string& path, int64_t timeout_ms);
  Result<uint64_t> ConnectTcp(const std::string& host, int port, int64_t timeout_ms);
  // Writes `bytes` (whole frames) to socket `conn`. Unavailable when it is gone.
  Status Send(uint64_t conn, const std::string& bytes);
  // Queues `bytes` for `conn`: written with what else is queued for it within
  // ~200 us, at 64 KiB, or at the next Flush. Many small frames, few writes.
  void SendLater(uint64_t conn, const std::string& bytes);
  // Writes everything queued now.
  void Flush();
  // Closes `conn`; on_close is called for it (from the poll thread).
  void Close(uint64_t conn);
  // Stops the thread and closes everything; on_close is not called. Idempotent.
  void Stop();

 private:
  struct Conn {
    int fd = -1;
    bool listener = false;
    bool tcp = false;
    std::string peer;
    std::mutex write_mu;
    std::string out;        // bytes not written yet, in order; guarded by write_mu
    bool blocked = false;   // the socket took no more: the poll thread writes `out` (POLLOUT); guarded
    std::vector<char> rbuf;
    size_t filled = 0;
  };
  uint64_t Add(int fd, bool listener, bool tcp, std::string peer);
  void Wake();
  void Loop();
  // Reads what `c` has; false when it closed or failed (`why` says how).
  bool ReadFrom(Conn& c, std::vector<Frame>* out, Status* why);
  // Writes `out` as far as the socket takes it without blocking; what is
  // left stays queued for POLLOUT. REQUIRES c.write_mu held.
  Status WriteOutLocked(Conn& c);

  FrameHandler on_frame_;
  CloseHandler on_close_;
  int wake_fd_ = -1;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> conns_;  // guarded by mu_
  uint64_t next_id_ = 1;                                       // guarded by mu_
  std::vector<std::shared_ptr<Conn>> queued_;                  // conns with SendLater bytes; guarded by mu_
  Clock::time_point queued_since_;                             // guarded by mu_
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace phalanx
