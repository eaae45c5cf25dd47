// DirectIo: the sockets between a caller and an actor's worker, which carry
// method calls straight to the actor without passing through a raylet.
//
// One thread watches every socket of the process (listeners, accepted and
// connected ones; an epoll set) and hands the whole frames each read brings
// to `on_frames` (a batch, so the handler takes its locks once per batch),
// on that thread; a closed or failed socket is reported once to `on_close`.
// With a `first_reader` (a worker's raylet connection), the thread waiting
// there is woken for an accepted plain socket in preference to this one and
// reads it itself (Readable; frames still reach `on_frames`, one reader at a
// time per socket, in order): an idle actor's main thread reads a call
// without being woken for it by this thread. Writes never
// block: the calling thread writes what the socket takes, the rest waits in
// the socket's queue for the poll thread (EPOLLOUT), so two processes that
// write to each other faster than they read cannot wedge each other. TCP
// sockets use TCP_NODELAY and keepalive probes, so a peer whose machine
// vanishes is noticed within seconds instead of never.
// Every connection opens with the cluster-token handshake (core/auth.h):
// Connect* runs the client side before it returns, and an accepted socket
// reports no frame before its peer proved the token (within kAuthTimeoutMs,
// else it is closed and the address logged). Unix peers must also run as
// this process's user. With a TLS context (--tls), TCP sockets are TLS
// under the handshake (core/tls.h); Unix sockets never leave the machine.
// Memory follows the bytes that arrived (FrameReader).
// The thread starts with the first socket; idle, it sleeps in epoll_wait: no CPU.
// Thread-safe.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <future>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/auth.h"
#include "core/blocking_connection.h"
#include "core/frame_reader.h"
#include "core/status.h"
#include "core/tls.h"

namespace phalanx {

class DirectIo : public BlockingConnection::SideReader {
 public:
  // `accepted`: `conn` was accepted by a listener here (a caller of this
  // actor), not connected from here.
  using FrameHandler = std::function<void(uint64_t conn, bool accepted, std::vector<Frame>& frames)>;
  using CloseHandler = std::function<void(uint64_t conn, const Status& why)>;

  // `token`: the cluster token both ends of every connection prove
  // (non-empty); `tls`: TLS for TCP sockets (null: plain).
  // `first_reader`: see above (null: this thread reads every socket).
  DirectIo(std::string token, std::shared_ptr<const TlsContext> tls, FrameHandler on_frames, CloseHandler on_close,
           BlockingConnection* first_reader = nullptr);
  ~DirectIo() override;  // closes every socket (without calling on_close) and joins the thread

  // Listens; accepted sockets get ids of their own and report through the handlers.
  Status ListenUnix(const std::string& path);
  // Listens on `host` with a port the kernel picks; returns the port.
  Result<int> ListenTcp(const std::string& host);
  // Connects, authenticates (the whole within `timeout_ms`) and returns the
  // socket's id. Unavailable/TimedOut name the peer.
  Result<uint64_t> ConnectUnix(const std::string& path, int64_t timeout_ms);
  Result<uint64_t> ConnectTcp(const std::string& host, int port, int64_t timeout_ms);
  // A socket taken out of (or never put in) the poll thread's care: its
  // owner reads and writes it itself, through `tls` when it is set. The
  // socket is non-blocking, authenticated, and (TCP) tuned as the poll
  // thread's are. The owner closes `fd`.
  struct Socket {
    int fd = -1;
    bool tcp = false;
    std::string peer;
    std::unique_ptr<TlsSession> tls;
  };
  // Connect and authenticate as ConnectUnix/ConnectTcp do, but hand the
  // socket over instead of adding it.
  Result<Socket> DialUnix(const std::string& path, int64_t timeout_ms);
  Result<Socket> DialTcp(const std::string& host, int port, int64_t timeout_ms);
  // Takes accepted or connected socket `conn` out of the poll thread's care
  // (done by that thread, between two reads, within `timeout_ms`); on_close
  // is never called for it. FailedPrecondition-like Unavailable if bytes of
  // a frame not yet whole were read from it: a peer must wait for a word
  // from the new owner before it sends more. Not from the poll thread.
  Result<Socket> Detach(uint64_t conn, int64_t timeout_ms);
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
  // The first reader's thread: accepted socket `conn` has bytes.
  void Readable(uint64_t conn) override;

 private:
  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    bool listener = false;
    bool tcp = false;
    bool accepted = false;       // by a listener here
    bool first_watched = false;  // also watched by the first reader (EPOLLEXCLUSIVE in both sets)
    // Held by whoever reads the socket (the poll thread or the first
    // reader's) while it reads and hands the frames on: one at a time, in order.
    std::mutex read_mu;
    std::string peer;
    std::mutex write_mu;
    std::string out;        // bytes not written yet, in order; guarded by write_mu
    // TLS (TCP with a context): the channel, used under write_mu by the
    // writers and the poll thread alike; `wire` holds its records not yet
    // written (`out` is encrypted into it as the socket takes bytes).
    std::unique_ptr<TlsSession> tls;
    std::string wire;       // guarded by write_mu
    size_t written = 0;     // bytes at the front of `out` (TLS: `wire`) already written; guarded by write_mu
    bool tls_bound = false;  // the handshake is bound to the channel; poll thread
    std::atomic<bool> unread{false};  // TLS: bytes decrypted or fed and not yet read
    bool blocked = false;   // the socket took no more: the poll thread writes `out` (EPOLLOUT); guarded
    int out_fd = -1;        // while blocked: a dup of fd in the epoll set for EPOLLOUT; guarded by write_mu
    FrameReader reader{64 << 10};  // (small while the peer authenticates)
    std::unique_ptr<Handshake> handshake;  // accepted sockets, until the peer authenticated
    Clock::time_point handshake_deadline;
  };
  // `authenticate`: an accepted socket, whose peer must prove the token first.
  uint64_t Add(int fd, bool listener, bool tcp, std::string peer, bool authenticate = false,
              std::unique_ptr<TlsSession> tls = nullptr);
  // Runs the client side of the handshake on connected `fd` (closing it if
  // that fails), then adds it (or, Authenticate, hands it over).
  Result<uint64_t> AddAuthenticated(int fd, bool tcp, const std::string& peer, int64_t timeout_ms);
  Result<Socket> Authenticate(int fd, bool tcp, const std::string& peer, int64_t timeout_ms);
  // A connected Unix socket to `path`, retried until `timeout_ms`.
  static Result<int> UnixWithin(const std::string& path, int64_t timeout_ms);
  struct DetachRequest;
  // Poll thread: the Detach requests that came since the last turn.
  void DetachRequested();
  // A handshake frame on an accepted socket; false if the peer failed.
  bool OnHandshakeFrame(Conn& c, const FrameHeader& h, const char* body, Status* why);
  void Wake();
  void Loop();
  // Waits for events until `wake` (max: no limit); the count, or -1 (errno).
  int WaitEvents(std::vector<epoll_event>* events, Clock::time_point wake);
  // The poll thread: socket `c` has bytes or a peer to accept.
  void Service(uint64_t id, const std::shared_ptr<Conn>& c);
  // An accepted socket's peer proved the token: watched first by the first reader from now on.
  void Authenticated(uint64_t id, Conn& c);
  std::shared_ptr<Conn> Find(uint64_t id);
  // While `c` is blocked, its dup is watched for EPOLLOUT. REQUIRES c.write_mu held.
  void WatchWritable(Conn& c, bool on);
  // Forgets and closes `c`; tells on_close if `report`. Poll thread only.
  void Drop(uint64_t id, Conn& c, const Status& why, bool report);
  // Reads what `c` has and hands the frames on (one reader at a time, under
  // c.read_mu); false when it closed or failed (`why` says how).
  bool ReadAndHandOn(uint64_t id, Conn& c, Status* why);
  // Reads what `c` has; false when it closed or failed (`why` says how).
  bool ReadFrom(Conn& c, std::vector<Frame>* out, Status* why);
  // TLS: feeds `n` bytes read from the socket to the channel and what it
  // decrypts into c.reader (sending the TLS handshake's replies); false as
  // ReadFrom. REQUIRES c.write_mu held.
  bool DecryptLocked(Conn& c, const char* raw, size_t n, Status* why);
  // Writes `out` as far as the socket takes it without blocking; what is
  // left stays queued for POLLOUT. REQUIRES c.write_mu held.
  Status WriteOutLocked(Conn& c);

  std::string token_;
  std::shared_ptr<const TlsContext> tls_;
  FrameHandler on_frame_;
  CloseHandler on_close_;
  BlockingConnection* const first_reader_;
  int wake_fd_ = -1;
  int epoll_fd_ = -1;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> conns_;  // guarded by mu_
  uint64_t next_id_ = 1;                                       // guarded by mu_
  std::vector<std::shared_ptr<Conn>> queued_;                  // conns with SendLater bytes; guarded by mu_
  Clock::time_point queued_since_;                             // guarded by mu_
  // Whether queued_ may be non-empty: Flush (before every get and wait) takes
  // no lock when nothing was queued. Set under mu_ with each push (so a
  // thread's own push is seen by its own Flush), cleared with the swap.
  std::atomic<bool> any_queued_{false};
  std::unordered_map<uint64_t, Clock::time_point> handshakes_;  // accepted, not authenticated yet: deadlines; guarded by mu_
  std::vector<uint64_t> reread_;  // sockets the first reader found closed: the poll thread reports them; guarded by mu_
  std::vector<uint64_t> again_;   // TLS sockets holding decrypted bytes: read next turn; poll thread only
  std::vector<char> raw_;  // TLS: bytes just read from a socket; poll thread only
  std::atomic<bool> stopping_{false};
  std::vector<std::shared_ptr<DetachRequest>> detaches_;  // guarded by mu_
  std::thread thread_;  // guarded by mu_
};

}  // namespace phalanx
