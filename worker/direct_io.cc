#include "worker/direct_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/frame.h"
#include "core/queued_write.h"
#include "core/logging.h"
#include "core/process.h"

namespace phalanx {

namespace {
constexpr size_t kReadChunk = 1 << 16;
constexpr size_t kQueuedBytes = 1 << 16;               // SendLater writes at once past this
constexpr auto kQueueDelay = std::chrono::microseconds(200);  // ... or after this
constexpr uint64_t kWakeKey = 0;                   // epoll keys: the wake eventfd (socket ids start at 1),
constexpr uint64_t kWritable = uint64_t{1} << 63;  // a blocked socket's EPOLLOUT dup (id | kWritable)

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void TuneTcp(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 2, interval = 1, count = 3;  // a vanished peer is noticed in ~5 s
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }
}  // namespace

DirectIo::DirectIo(std::string token, std::shared_ptr<const TlsContext> tls, FrameHandler on_frames,
                   CloseHandler on_close, BlockingConnection* first_reader)
    : token_(std::move(token)),
      tls_(std::move(tls)),
      on_frame_(std::move(on_frames)),
      on_close_(std::move(on_close)),
      first_reader_(first_reader) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

DirectIo::~DirectIo() {
  Stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void DirectIo::Stop() {
  if (stopping_.exchange(true)) return;
  Wake();
  std::thread poller;
  {
    std::lock_guard<std::mutex> l(mu_);
    poller = std::move(thread_);
  }
  if (poller.joinable()) poller.join();
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> conns;
  {
    std::lock_guard<std::mutex> l(mu_);
    conns.swap(conns_);
  }
  for (auto& [id, c] : conns) {  // (the first reader may be reading one: read_mu first)
    std::lock_guard<std::mutex> r(c->read_mu);
    std::lock_guard<std::mutex> w(c->write_mu);
    if (c->first_watched) first_reader_->Unwatch(c->fd);
    if (c->out_fd >= 0) ::close(c->out_fd);
    if (c->fd >= 0) ::close(c->fd);
    c->fd = c->out_fd = -1;
  }
}

void DirectIo::Wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  (void)n;
}

uint64_t DirectIo::Add(int fd, bool listener, bool tcp, std::string peer, bool authenticate,
                       std::unique_ptr<TlsSession> tls) {
  auto c = std::make_shared<Conn>();
  c->fd = fd;
  c->listener = listener;
  c->tcp = tcp;
  c->peer = std::move(peer);
  c->tls = std::move(tls);
  if (c->tls) {  // a connected socket: the handshake ran; bytes past it may wait in the channel
    c->tls_bound = true;
    c->unread = c->tls->has_input();
  }
  if (authenticate && tcp && tls_) c->tls = std::make_unique<TlsSession>(tls_, /*server=*/true, c->peer);
  if (authenticate) {
    c->handshake = std::make_unique<Handshake>(Handshake::Role::kServer, token_, c->peer);
    c->handshake_deadline = Clock::now() + std::chrono::milliseconds(kAuthTimeoutMs);
    c->reader.set_handshake_only(true);
  }
  c->accepted = authenticate;
  SetNonBlocking(fd);
  if (!listener && tcp) TuneTcp(fd);
  uint64_t id;
  {
    std::lock_guard<std::mutex> l(mu_);
    id = next_id_++;
    c->id = id;
    if (c->handshake) handshakes_[id] = c->handshake_deadline;
    conns_[id] = c;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    // The poll thread starts with the first socket (most processes never make one).
    if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { Loop(); });
  }
  if (c->handshake) Wake();  // (its deadline counts from now)
  return id;
}

std::shared_ptr<DirectIo::Conn> DirectIo::Find(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : it->second;
}

Status DirectIo::ListenUnix(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return Status::InvalidArgument("socket path too long: " + path);
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ::unlink(path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(Errno("socket()"));
  // Only this user may connect (connect() needs write permission on the
  // socket; it lives in the 0700 session folder meanwhile). No umask: it is
  // the whole process's, and this one has other threads.
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::chmod(path.c_str(), 0600) != 0 ||
      ::listen(fd, 128) != 0) {
    Status st = Status::Unavailable(Errno(("cannot listen on " + path).c_str()));
    ::close(fd);
    return st;
  }
  Add(fd, true, false, path);
  return Status::OK();
}

Result<int> DirectIo::ListenTcp(const std::string& host) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("not an IPv4 address: " + host);
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(Errno("socket()"));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Status st = Status::Unavailable(Errno(("cannot listen on " + host).c_str()));
    ::close(fd);
    return st;
  }
  Add(fd, true, true, host);
  return static_cast<int>(ntohs(addr.sin_port));
}

Result<int> DirectIo::UnixWithin(const std::string& path, int64_t timeout_ms) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return Status::InvalidArgument("socket path too long: " + path);
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  Deadline deadline = DeadlineAfterMs(timeout_ms);
  while (true) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::Unavailable(Errno("socket()"));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    std::string err = std::strerror(errno);
    ::close(fd);
    if (Clock::now() >= deadline) return Status::Unavailable("cannot connect to " + path + ": " + err);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<uint64_t> DirectIo::ConnectUnix(const std::string& path, int64_t timeout_ms) {
  Deadline deadline = DeadlineAfterMs(timeout_ms);
  PHALANX_ASSIGN_OR_RETURN(int fd, UnixWithin(path, timeout_ms));
  return AddAuthenticated(fd, /*tcp=*/false, path, MsLeft(deadline));
}

Result<uint64_t> DirectIo::ConnectTcp(const std::string& host, int port, int64_t timeout_ms) {
  PHALANX_ASSIGN_OR_RETURN(int fd, ConnectTcpWithin(host, port, timeout_ms));
  return AddAuthenticated(fd, /*tcp=*/true, host + ":" + std::to_string(port), timeout_ms);
}

Result<DirectIo::Socket> DirectIo::DialUnix(const std::string& path, int64_t timeout_ms) {
  Deadline deadline = DeadlineAfterMs(timeout_ms);
  PHALANX_ASSIGN_OR_RETURN(int fd, UnixWithin(path, timeout_ms));
  return Authenticate(fd, /*tcp=*/false, path, MsLeft(deadline));
}

Result<DirectIo::Socket> DirectIo::DialTcp(const std::string& host, int port, int64_t timeout_ms) {
  PHALANX_ASSIGN_OR_RETURN(int fd, ConnectTcpWithin(host, port, timeout_ms));
  return Authenticate(fd, /*tcp=*/true, host + ":" + std::to_string(port), timeout_ms);
}

Result<DirectIo::Socket> DirectIo::Authenticate(int fd, bool tcp, const std::string& peer, int64_t timeout_ms) {
  Socket s;
  Status st = ClientHandshake(fd, token_, peer, std::max<int64_t>(timeout_ms, 1), tcp ? tls_ : nullptr, &s.tls);
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  SetNonBlocking(fd);
  if (tcp) TuneTcp(fd);
  s.fd = fd;
  s.tcp = tcp;
  s.peer = peer;
  return s;
}

struct DirectIo::DetachRequest {
  uint64_t conn = 0;
  std::promise<Result<Socket>> done;
};

Result<DirectIo::Socket> DirectIo::Detach(uint64_t conn, int64_t timeout_ms) {
  auto req = std::make_shared<DetachRequest>();
  req->conn = conn;
  auto done = req->done.get_future();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!thread_.joinable() || stopping_) return Status::Unavailable("direct connections are stopped");
    detaches_.push_back(req);
  }
  Wake();
  if (done.wait_for(std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 1))) != std::future_status::ready) {
    return Status::TimedOut("the poll thread did not hand over connection " + std::to_string(conn));
  }
  return done.get();
}

void DirectIo::DetachRequested() {
  std::vector<std::shared_ptr<DetachRequest>> reqs;
  std::lock_guard<std::mutex> l(mu_);
  reqs.swap(detaches_);
  for (auto& req : reqs) {
    auto it = conns_.find(req->conn);
    if (it == conns_.end()) {
      req->done.set_value(Status::Unavailable("connection " + std::to_string(req->conn) + " is closed"));
      continue;
    }
    Conn& c = *it->second;
    // (try_lock: the first reader holds read_mu while it takes mu_; busy is busy)
    std::unique_lock<std::mutex> r(c.read_mu, std::try_to_lock);
    std::lock_guard<std::mutex> w(c.write_mu);
    if (!r.owns_lock() || c.listener || c.handshake || c.reader.buffered() > 0 || !c.out.empty() ||
        !c.wire.empty()) {
      req->done.set_value(Status::Unavailable(c.peer + ": its connection is busy and cannot be handed over"));
      continue;
    }
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    if (c.first_watched) first_reader_->Unwatch(c.fd);
    Socket s;
    s.fd = c.fd;
    s.tcp = c.tcp;
    s.peer = c.peer;
    s.tls = std::move(c.tls);
    c.fd = -1;
    conns_.erase(it);
    req->done.set_value(std::move(s));
  }
}

Result<uint64_t> DirectIo::AddAuthenticated(int fd, bool tcp, const std::string& peer, int64_t timeout_ms) {
  PHALANX_ASSIGN_OR_RETURN(Socket s, Authenticate(fd, tcp, peer, timeout_ms));
  return Add(s.fd, false, tcp, peer, /*authenticate=*/false, std::move(s.tls));
}

Status DirectIo::Send(uint64_t conn, const std::string& bytes) {
  std::shared_ptr<Conn> c;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = conns_.find(conn);
    if (it == conns_.end()) return Status::Unavailable("direct connection " + std::to_string(conn) + " is closed");
    c = it->second;
  }
  std::lock_guard<std::mutex> w(c->write_mu);
  c->out += bytes;  // after what SendLater queued: order kept
  return WriteOutLocked(*c);
}

Status DirectIo::WriteOutLocked(Conn& c) {
  if (c.blocked) return Status::OK();  // the poll thread writes when the socket has room
  if (c.tls) {
    // Frames are sealed into records only once the channel is up (an
    // accepted socket's first frames are the handshake's own replies).
    if (!c.out.empty() && c.tls->established()) {
      Status st = c.tls->Write(c.out.data(), c.out.size());
      c.out.clear();
      if (!st.ok()) {
        if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
        return st;
      }
    }
    c.tls->TakeOutput(&c.wire);
  }
  std::string& pending = c.tls ? c.wire : c.out;
  if (c.written == pending.size()) return Status::OK();
  if (c.fd < 0) return Status::Unavailable(c.peer + " is closed");
  bool full;
  Status st = WriteQueued(c.fd, &pending, &c.written, kQueuedBytes, &full);
  if (!st.ok()) {
    ::shutdown(c.fd, SHUT_RDWR);  // the poll thread reports the close
    pending.clear();
    c.written = 0;
    return Status::Unavailable("cannot write to " + c.peer + ": " + st.message());
  }
  if (full) {
    c.blocked = true;
    WatchWritable(c, true);  // the poll thread writes the rest when the socket has room
  }
  return Status::OK();
}

void DirectIo::WatchWritable(Conn& c, bool on) {
  // (A dup: an EPOLLEXCLUSIVE registration cannot be modified to add EPOLLOUT.)
  if (on && c.out_fd < 0 && c.fd >= 0) {
    c.out_fd = ::fcntl(c.fd, F_DUPFD_CLOEXEC, 0);
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = c.id | kWritable;
    if (c.out_fd >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.out_fd, &ev);
  } else if (!on && c.out_fd >= 0) {
    // (Closing a dup does not take it out of the set: the socket stays open.)
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.out_fd, nullptr);
    ::close(c.out_fd);
    c.out_fd = -1;
  }
}

void DirectIo::SendLater(uint64_t conn, const std::string& bytes) {
  std::shared_ptr<Conn> c;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = conns_.find(conn);
    if (it == conns_.end()) return;  // closed: its close handler deals with what was meant for it
    c = it->second;
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> w(c->write_mu);
    first = c->out.empty();
    c->out += bytes;
    if (c->out.size() >= kQueuedBytes) {
      (void)WriteOutLocked(*c);
      return;
    }
  }
  if (first) {
    bool wake;
    {
      std::lock_guard<std::mutex> l(mu_);
      wake = queued_.empty();
      if (wake) queued_since_ = Clock::now();
      queued_.push_back(std::move(c));
      any_queued_.store(true, std::memory_order_release);
    }
    if (wake) Wake();  // the poll thread writes it shortly
  }
}

void DirectIo::Flush() {
  if (!any_queued_.load(std::memory_order_acquire)) return;
  std::vector<std::shared_ptr<Conn>> queued;
  {
    std::lock_guard<std::mutex> l(mu_);
    queued.swap(queued_);
    any_queued_.store(false, std::memory_order_relaxed);
  }
  for (auto& c : queued) {
    std::lock_guard<std::mutex> w(c->write_mu);
    (void)WriteOutLocked(*c);
  }
}

void DirectIo::Close(uint64_t conn) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  std::lock_guard<std::mutex> w(it->second->write_mu);
  if (it->second->fd >= 0) ::shutdown(it->second->fd, SHUT_RDWR);
}

bool DirectIo::OnHandshakeFrame(Conn& c, const FrameHeader& h, const char* body, Status* why) {
  auto reply = c.handshake->OnFrame(h, body, h.length);
  if (!reply.ok()) {
    LogRefusedPeer(c.peer, reply.status().message());
    *why = reply.status();
    return false;
  }
  if (!reply.value().empty()) {
    std::lock_guard<std::mutex> w(c.write_mu);
    c.out += reply.value();
    Status st = WriteOutLocked(c);
    if (!st.ok()) {
      *why = st;
      return false;
    }
  }
  if (c.handshake->done()) {
    c.handshake.reset();
    c.reader.set_handshake_only(false);
  }
  return true;
}

bool DirectIo::DecryptLocked(Conn& c, const char* raw, size_t n, Status* why) {
  c.tls->Feed(raw, n);
  c.unread = false;
  while (true) {
    auto space = c.reader.Space();
    if (!space.ok()) {
      *why = Status::Unavailable(c.peer + ": " + space.status().message());
      return false;
    }
    auto got = c.tls->Read(space.value().first, space.value().second);
    if (!got.ok()) {
      if (c.handshake) LogRefusedPeer(c.peer, got.status().message());
      *why = got.status();
      return false;
    }
    if (got.value() == 0) break;
    c.reader.Commit(got.value());
    if (c.reader.buffered() >= kReadChunk) {  // enough for one batch: the rest at the next turn
      c.unread = c.tls->has_input();
      break;
    }
  }
  if (!c.tls_bound && c.tls->established()) {
    c.tls_bound = true;
    c.handshake->set_channel_binding(c.tls->ChannelBinding());
  }
  if (c.tls->has_output()) {  // the TLS handshake's replies
    Status st = WriteOutLocked(c);
    if (!st.ok()) {
      *why = st;
      return false;
    }
  }
  return true;
}

bool DirectIo::ReadFrom(Conn& c, std::vector<Frame>* out, Status* why) {
  // Plain: straight into the frame reader. TLS: into raw_, then decrypted into it.
  if (c.tls && raw_.empty()) raw_.resize(kReadChunk);
  std::pair<char*, size_t> into{raw_.data(), raw_.size()};
  if (!c.tls) {
    auto space = c.reader.Space();
    if (!space.ok()) {
      *why = Status::Unavailable(c.peer + ": " + space.status().message());
      return false;
    }
    into = space.value();
  }
  ssize_t n = ::recv(c.fd, into.first, into.second, MSG_DONTWAIT);
  if (n == 0) {
    *why = Status::Unavailable(c.peer + " closed the connection");
    return false;
  }
  if (n < 0 && errno != EAGAIN && errno != EINTR) {
    *why = Status::Unavailable(c.peer + ": " + std::strerror(errno));
    return false;
  }
  size_t got = n > 0 ? static_cast<size_t>(n) : 0;
  if (c.tls) {
    std::lock_guard<std::mutex> w(c.write_mu);  // (the channel is shared with the writers)
    if (!DecryptLocked(c, raw_.data(), got, why)) return false;
  } else {
    if (got == 0) return true;
    c.reader.Commit(got);
  }
  while (true) {
    FrameHeader h;
    const char* body = nullptr;
    auto got = c.reader.Next(&h, &body);
    if (!got.ok()) {
      if (c.handshake) LogRefusedPeer(c.peer, got.status().message());
      *why = Status::Unavailable(c.peer + " sent a malformed frame: " + got.status().message());
      return false;
    }
    if (!got.value()) return true;
    if (c.handshake) {
      if (!OnHandshakeFrame(c, h, body, why)) return false;
      continue;
    }
    out->push_back(Frame{h, std::string(body, h.length)});
  }
}

void DirectIo::Readable(uint64_t conn) {
  std::shared_ptr<Conn> c = Find(conn);
  if (!c) return;
  Status why;
  if (ReadAndHandOn(conn, *c, &why)) return;
  {
    std::lock_guard<std::mutex> l(mu_);  // the poll thread reads it again, finds it closed and reports it
    reread_.push_back(conn);
  }
  Wake();
}

bool DirectIo::ReadAndHandOn(uint64_t id, Conn& c, Status* why) {
  std::vector<Frame> frames;
  std::lock_guard<std::mutex> r(c.read_mu);
  if (c.fd < 0) return true;  // (dropped meanwhile: nothing more to do)
  bool authenticating = c.handshake != nullptr;
  bool open = ReadFrom(c, &frames, why);
  if (open && authenticating && !c.handshake) Authenticated(id, c);
  if (!frames.empty()) on_frame_(id, c.accepted, frames);
  return open;
}

int DirectIo::WaitEvents(std::vector<epoll_event>* events, Clock::time_point wake) {
  int max = static_cast<int>(events->size());
  if (wake == Clock::time_point::max()) return ::epoll_wait(epoll_fd_, events->data(), max, -1);
  auto left = std::max(Clock::duration::zero(), wake - Clock::now());
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
#ifdef SYS_epoll_pwait2
  // Sub-millisecond: a burst of SendLater frames gathers for 200 us.
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  int r = static_cast<int>(::syscall(SYS_epoll_pwait2, epoll_fd_, events->data(), max, &ts, nullptr, 0));
  if (r >= 0 || errno != ENOSYS) return r;
#endif
  return ::epoll_wait(epoll_fd_, events->data(), max, static_cast<int>((ns + 999999) / 1000000));
}

void DirectIo::Loop() {
  NameThisThread("phalanx-direct");
  std::vector<epoll_event> events(64);
  while (!stopping_) {
    DetachRequested();
    bool queued;
    Clock::time_point since;
    Clock::time_point auth_due = Clock::time_point::max();  // the next handshake deadline
    std::vector<uint64_t> expired, reread;
    {
      std::lock_guard<std::mutex> l(mu_);
      queued = !queued_.empty();
      since = queued_since_;
      auto now = Clock::now();
      for (auto& [id, due] : handshakes_) {
        if (due <= now) expired.push_back(id);
        auth_due = std::min(auth_due, due);
      }
      reread.swap(reread_);
    }
    for (uint64_t id : expired) {  // silent or slow to authenticate: closed, never read
      if (auto c = Find(id)) {
        LogRefusedPeer(c->peer, "did not authenticate within " + std::to_string(kAuthTimeoutMs) + " ms");
        Drop(id, *c, Status::Unavailable(c->peer + " did not authenticate"), /*report=*/false);
      }
    }
    std::vector<uint64_t> again;
    again.swap(again_);
    again.insert(again.end(), reread.begin(), reread.end());
    Clock::time_point wake = again.empty() ? auth_due : Clock::now();  // (TLS bytes waiting: do not sleep)
    if (queued) wake = std::min(wake, since + kQueueDelay);
    int n = WaitEvents(&events, wake);
    if (n < 0) {
      if (errno == EINTR) continue;
      PHALANX_LOG(Error) << "direct connections: epoll_wait failed: " << std::strerror(errno);
      return;
    }
    // Let a burst of SendLater frames gather, then write each socket's in one go.
    if (queued && Clock::now() >= since + kQueueDelay) Flush();
    if (stopping_) return;
    for (int i = 0; i < n; ++i) {
      uint64_t key = events[i].data.u64;
      if (key == kWakeKey) {
        uint64_t v;
        while (::read(wake_fd_, &v, sizeof(v)) > 0) {
        }
        continue;
      }
      std::shared_ptr<Conn> c = Find(key & ~kWritable);
      if (!c) continue;
      if (key & kWritable) {
        std::lock_guard<std::mutex> w(c->write_mu);
        c->blocked = false;
        (void)WriteOutLocked(*c);
        if (!c->blocked || (events[i].events & (EPOLLERR | EPOLLHUP))) WatchWritable(*c, false);
        continue;
      }
      Service(c->id, c);
    }
    for (uint64_t id : again) {
      if (auto c = Find(id)) Service(id, c);
    }
  }
}

void DirectIo::Service(uint64_t id, const std::shared_ptr<Conn>& conn) {
  Conn& c = *conn;
  if (c.listener) {
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    int fd = ::accept4(c.fd, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    std::string peer = "caller on " + c.peer;
    if (c.tcp && from.ss_family == AF_INET) {
      char ip[INET_ADDRSTRLEN] = {};
      auto* in = reinterpret_cast<sockaddr_in*>(&from);
      ::inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
      peer = std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
    }
    if (!c.tcp) {
      Status who = CheckPeerUser(fd);
      if (!who.ok()) {
        LogRefusedPeer(c.peer, who.message());
        ::close(fd);
        return;
      }
    }
    Add(fd, false, c.tcp, peer, /*authenticate=*/true);
    return;
  }
  Status why;
  if (ReadAndHandOn(id, c, &why)) {
    if (c.tls && c.unread) again_.push_back(id);
    return;
  }
  bool authenticated = !c.handshake;
  if (authenticated && !why.message().empty() && why.message().find("closed the connection") == std::string::npos) {
    PHALANX_LOG(Warning) << "direct connection lost: " << why.message();
  }
  Drop(id, c, why, /*report=*/authenticated);
}

void DirectIo::Authenticated(uint64_t id, Conn& c) {
  {
    std::lock_guard<std::mutex> l(mu_);
    handshakes_.erase(id);
  }
  if (!first_reader_ || c.tls) return;  // (TLS sockets: this thread decrypts them)
  // The first reader's registration must come first in the socket's wait
  // queue: out of this set, into the reader's, back into this one. Bytes
  // that came meanwhile are seen by the ADD (level-triggered).
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = id;
  if (first_reader_->WatchFirst(c.fd, id, this).ok()) {
    c.first_watched = true;
    ev.events |= EPOLLEXCLUSIVE;
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev);
}

void DirectIo::Drop(uint64_t id, Conn& c, const Status& why, bool report) {
  {
    std::lock_guard<std::mutex> l(mu_);
    conns_.erase(id);
    handshakes_.erase(id);
  }
  {
    std::lock_guard<std::mutex> r(c.read_mu);  // (the first reader may be reading it)
    std::lock_guard<std::mutex> w(c.write_mu);
    if (c.fd >= 0 && c.first_watched) first_reader_->Unwatch(c.fd);
    WatchWritable(c, false);
    if (c.fd >= 0) ::close(c.fd);  // (its last descriptor: it leaves the epoll sets)
    c.fd = -1;
  }
  if (report) on_close_(id, why);  // (a peer that never authenticated was never reported)
}

}  // namespace phalanx
