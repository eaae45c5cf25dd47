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
  handshake_ = std::make_unique<Handshake>(role, token, peer_name_);
  auth_address_ = std::move(address);
  reader_.set_handshake_only(true);
  auth_timeout_ms_ = timeout_ms;
  auth_timer_ = std::make_unique<asio::steady_timer>(socket_.get_executor(), std::chrono::milliseconds(timeout_ms));
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
    std::string hello = handshake_->Begin();
    if (!hello.empty()) {
      handshake_out_.push_back(OutFrame{std::move(hello)});
      WriteMore();
    }
  }
  ReadMore();
}

void FramedConnection::ReadMore() {
  auto space = reader_.Space();
  if (!space.ok()) {
    PHALANX_LOG(Warning) << "closing connection to " << peer_name_ << ": " << space.status().message();
    Fail(space.status());
    return;
  }
  auto self = shared_from_this();
  socket_.async_read_some(
      asio::buffer(space.value().first, space.value().second),
      [this, self](const boost::system::error_code& ec, size_t n) {
        if (closed_) return;
        if (ec) {
          bool clean = ec == asio::error::eof && reader_.buffered() == 0;
          Fail(clean ? Status::OK()
                     : Status::Unavailable(peer_name_ + ": " +
                                           (ec == asio::error::eof ? "connection lost mid-frame" : ec.message())));
          return;
        }
        reader_.Commit(n);
        if (!DispatchFrames()) return;
        ReadMore();
      });
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
  if (writing_.empty()) WriteMore();
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
  if (writing_.empty() && !write_scheduled_) {
    // Write after the current handler: whatever else it sends joins this write.
    write_scheduled_ = true;
    asio::post(socket_.get_executor(), [this, self = shared_from_this()] {
      write_scheduled_ = false;
      if (writing_.empty()) WriteMore();
    });
  }
}

void FramedConnection::WriteMore() {
  if (closed_) return;
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
  take(handshake_out_, false);
  if (!handshake_ && handshake_out_.empty()) take(queue_, true);
  if (bufs.empty()) return;
  auto self = shared_from_this();
  asio::async_write(socket_, bufs, [this, self, from_queue](const boost::system::error_code& ec, size_t) {
    writing_.clear();
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
  PHALANX_CHECK(writing_.empty() && queue_.empty() && !write_scheduled_) << "SendWithFd with writes in flight";
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
