#include "core/framed_connection.h"

#include <sys/socket.h>

#include "core/logging.h"

namespace phalanx {

namespace asio = boost::asio;

namespace {
// An authenticated connection reads up to 64 KiB at a time (a smaller first
// buffer cost sync tasks 10%); one still authenticating holds no more than a
// handshake frame (a thousand of them cost little).
constexpr size_t kInitialReadBuffer = 64 << 10;
}  // namespace

FramedConnection::FramedConnection(Socket socket, std::string peer_name)
    : socket_(std::move(socket)), peer_name_(std::move(peer_name)), reader_(kInitialReadBuffer) {}

void FramedConnection::RequireAuth(Handshake::Role role, const std::string& token, std::string address,
                                   int64_t timeout_ms) {
  role_ = role;
  handshake_ = std::make_unique<Handshake>(role, token, peer_name_);
  auth_address_ = std::move(address);
  reader_.set_handshake_only(true);
  auth_timeout_ms_ = timeout_ms;
  auth_timer_ = std::make_unique<asio::steady_timer>(socket_.get_executor(), std::chrono::milliseconds(timeout_ms));
}

void FramedConnection::UseTls(std::shared_ptr<const TlsContext> ctx) {
  PHALANX_CHECK(handshake_) << "TLS without the handshake";
  tls_ = std::make_unique<TlsSession>(std::move(ctx), role_ == Handshake::Role::kServer, peer_name_);
  tls_in_.resize(64 << 10);
}

FramedConnection::~FramedConnection() {
  boost::system::error_code ec;
  socket_.close(ec);
}

void FramedConnection::Start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  if (handshake_) {
    std::weak_ptr<FramedConnection> weak = shared_from_this();
    auth_timer_->async_wait([weak](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_ || !self->handshake_) return;
      std::string why = "did not authenticate within " + std::to_string(self->auth_timeout_ms_) + " ms";
      LogRefusedPeer(self->auth_address_, why);
      self->Fail(Status::Unavailable(self->peer_name_ + " " + why));
    });
    if (tls_) {
      Status st = tls_->Advance();  // a client's first flight
      PHALANX_CHECK(st.ok()) << st.message();
      WriteMore();
    } else {
      OnChannelReady();
    }
  }
  ReadMore();
}

void FramedConnection::OnChannelReady() {
  channel_ready_ = true;
  if (tls_) handshake_->set_channel_binding(tls_->ChannelBinding());
  std::string hello = handshake_->Begin();
  if (!hello.empty()) handshake_out_.push_back(OutFrame{std::move(hello)});
  if (!write_in_flight_) WriteMore();
}

void FramedConnection::ReadMore() {
  char* into;
  size_t room;
  if (tls_) {
    into = tls_in_.data();
    room = tls_in_.size();
  } else {
    std::pair<char*, size_t> space;
    if (!ReaderSpace(&space)) return;
    into = space.first;
    room = space.second;
  }
  auto self = shared_from_this();
  socket_.async_read_some(asio::buffer(into, room), [this, self, into](const boost::system::error_code& ec, size_t n) {
    if (closed_) return;
    if (ec) {
      bool clean = ec == asio::error::eof && reader_.buffered() == 0;
      Fail(clean ? Status::OK()
                 : Status::Unavailable(peer_name_ + ": " +
                                       (ec == asio::error::eof ? "connection lost mid-frame" : ec.message())));
      return;
    }
    if (!OnBytes(into, n)) return;
    ReadMore();
  });
}

bool FramedConnection::ReaderSpace(std::pair<char*, size_t>* out) {
  auto space = reader_.Space();
  if (!space.ok()) {
    PHALANX_LOG(Warning) << "closing connection to " << peer_name_ << ": " << space.status().message();
    Fail(space.status());
    return false;
  }
  *out = space.value();
  return true;
}

bool FramedConnection::OnBytes(const char* data, size_t n) {
  if (first_bytes_ && handshake_ && !tls_ && role_ == Handshake::Role::kServer && LooksLikeTls(data, n)) {
    std::string why = "speaks TLS: the peer runs with --tls (PHALANX_TLS=1), this node without; every node of a "
                      "cluster must use the same setting";
    LogRefusedPeer(auth_address_, why);
    Fail(Status::Unavailable(peer_name_ + " " + why));
    return false;
  }
  first_bytes_ = false;
  if (!tls_) {
    reader_.Commit(n);
    return DispatchFrames();
  }
  tls_->Feed(data, n);
  return DrainTls();
}

bool FramedConnection::DrainTls() {
  while (true) {
    std::pair<char*, size_t> space;
    if (!ReaderSpace(&space)) return false;
    auto got = tls_->Read(space.first, space.second);
    if (!got.ok()) {
      if (handshake_) LogRefusedPeer(auth_address_, got.status().message());
      Fail(got.status());
      return false;
    }
    if (!channel_ready_ && tls_->established()) OnChannelReady();
    if (got.value() == 0) break;
    reader_.Commit(got.value());
    if (!DispatchFrames()) return false;
  }
  if (tls_->has_output() && !write_in_flight_) WriteMore();  // handshake flights
  return true;
}

bool FramedConnection::OnHandshakeFrame(const FrameHeader& h, const char* body) {
  auto reply = handshake_->OnFrame(h, body, h.length);
  if (!reply.ok()) {
    LogRefusedPeer(auth_address_, reply.status().message());
    Fail(reply.status());
    return false;
  }
  if (!reply.value().empty()) handshake_out_.push_back(OutFrame{std::move(reply).value()});
  if (handshake_->done()) {
    handshake_.reset();
    auth_timer_->cancel();
    reader_.set_handshake_only(false);
  }
  if (!write_in_flight_) WriteMore();
  return true;
}

bool FramedConnection::DispatchFrames() {
  while (true) {
    FrameHeader h;
    const char* body = nullptr;
    auto got = reader_.Next(&h, &body);
    if (!got.ok()) {
      if (handshake_) {
        LogRefusedPeer(auth_address_, got.status().message());
      } else {
        PHALANX_LOG(Warning) << "closing connection to " << peer_name_ << ": " << got.status().message();
      }
      Fail(got.status());
      return false;
    }
    if (!got.value()) return true;
    if (handshake_) {
      if (!OnHandshakeFrame(h, body)) return false;
      continue;
    }
    on_frame_(h, h.length ? body : nullptr, h.length);
    if (closed_) return false;
  }
}

void FramedConnection::Send(OutFrame frame) {
  if (closed_) return;
  queued_bytes_ += frame.size();
  queue_.push_back(std::move(frame));
  if (handshake_) return;  // written once the peer authenticated
  if (!write_in_flight_ && !write_scheduled_) {
    // Write after the current handler: whatever else it sends joins this write.
    write_scheduled_ = true;
    asio::post(socket_.get_executor(), [this, self = shared_from_this()] {
      write_scheduled_ = false;
      if (!write_in_flight_) WriteMore();
    });
  }
}

void FramedConnection::WriteMore() {
  if (closed_ || write_in_flight_) return;
  std::vector<asio::const_buffer> bufs;
  size_t total = 0;        // bytes in this write
  size_t from_queue = 0;   // of those, Send's (counted in queued_bytes_)
  auto take = [&](std::deque<OutFrame>& q, bool counted) {
    while (!q.empty() && bufs.size() < 256 && total < (8u << 20)) {
      writing_.push_back(std::move(q.front()));
      q.pop_front();
      const OutFrame& f = writing_.back();
      total += f.size();
      if (counted) from_queue += f.size();
      bufs.emplace_back(asio::buffer(f.bytes));
      if (f.tail_len > 0) bufs.emplace_back(asio::buffer(f.tail, f.tail_len));
    }
  };
  if (!tls_ || channel_ready_) take(handshake_out_, false);
  if (!handshake_ && handshake_out_.empty()) take(queue_, true);
  if (tls_) {
    // One buffer of records: the frames encrypted (copied), then written whole.
    for (const auto& b : bufs) {
      Status st = tls_->Write(static_cast<const char*>(b.data()), b.size());
      if (!st.ok()) {
        Fail(st);
        return;
      }
    }
    writing_.clear();  // (their bytes are in the records now)
    tls_->TakeOutput(&tls_out_);
    bufs.assign(1, asio::buffer(tls_out_));
    if (tls_out_.empty()) bufs.clear();
  }
  if (bufs.empty()) {
    queued_bytes_ -= from_queue;
    return;
  }
  write_in_flight_ = true;
  auto self = shared_from_this();
  asio::async_write(socket_, bufs, [this, self, from_queue](const boost::system::error_code& ec, size_t) {
    write_in_flight_ = false;
    writing_.clear();
    tls_out_.clear();
    queued_bytes_ -= from_queue;
    if (closed_) return;
    if (ec) {
      Fail(Status::Unavailable(peer_name_ + ": write failed: " + ec.message()));
      return;
    }
    WriteMore();
  });
}

Status FramedConnection::SendWithFd(const std::string& frame, int fd) {
  PHALANX_CHECK(!tls_ && !write_in_flight_ && queue_.empty() && !write_scheduled_) << "SendWithFd with writes in flight";
  struct msghdr msg {};
  struct iovec iov {};
  iov.iov_base = const_cast<char*>(frame.data());
  iov.iov_len = frame.size();
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  int native = socket_.native_handle();
  // The socket is non-blocking under Asio; a small first frame fits the buffer.
  ssize_t n = ::sendmsg(native, &msg, MSG_NOSIGNAL);
  if (n < 0) return Status::Unavailable(peer_name_ + ": sendmsg failed: " + std::strerror(errno));
  if (static_cast<size_t>(n) < frame.size()) {
    Send(OutFrame{frame.substr(n)});  // the rest as ordinary bytes
  }
  return Status::OK();
}

void FramedConnection::Fail(const Status& why) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ec;
  socket_.close(ec);
  queue_.clear();
  handshake_out_.clear();
  if (auth_timer_) auth_timer_->cancel();
  if (on_close_) {
    auto cb = std::move(on_close_);
    on_close_ = nullptr;
    on_frame_ = nullptr;
    cb(why);
  }
}

void FramedConnection::Close() { Fail(Status::OK()); }

}  // namespace phalanx
