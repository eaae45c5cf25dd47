#include "core/framed_connection.h"

#include <sys/socket.h>

#include "core/logging.h"

namespace phalanx {

namespace asio = boost::asio;

FramedConnection::FramedConnection(Socket socket, std::string peer_name)
    : socket_(std::move(socket)), peer_name_(std::move(peer_name)) {}

FramedConnection::~FramedConnection() {
  boost::system::error_code ec;
  socket_.close(ec);
}

void FramedConnection::Start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  rbuf_.resize(64 * 1024);
  ReadMore();
}

size_t FramedConnection::ReadSpace() const {
  size_t space = rbuf_.size() - rbuf_filled_;
  if (rbuf_filled_ < kFrameHeaderSize) return space;
  size_t total = kFrameHeaderSize + DecodeHeader(rbuf_.data()).length;
  // (A frame in rbuf_ is incomplete here: DispatchFrames took the whole ones.)
  if (total < (64u << 10) || total <= rbuf_filled_) return space;
  return std::min(space, total - rbuf_filled_);
}

void FramedConnection::ReadMore() {
  if (rbuf_.size() - rbuf_filled_ < 4096) rbuf_.resize(rbuf_.size() * 2);
  auto self = shared_from_this();
  socket_.async_read_some(
      asio::buffer(rbuf_.data() + rbuf_filled_, ReadSpace()),
      [this, self](const boost::system::error_code& ec, size_t n) {
        if (closed_) return;
        if (ec) {
          bool clean = ec == asio::error::eof && rbuf_filled_ == 0;
          Fail(clean ? Status::OK()
                     : Status::Unavailable(peer_name_ + ": " +
                                           (ec == asio::error::eof ? "connection lost mid-frame" : ec.message())));
          return;
        }
        rbuf_filled_ += n;
        if (!DispatchFrames()) return;
        ReadMore();
      });
}

bool FramedConnection::DispatchFrames() {
  size_t pos = 0;
  while (rbuf_filled_ - pos >= kFrameHeaderSize) {
    FrameHeader h = DecodeHeader(rbuf_.data() + pos);
    Status st = ValidateHeader(h);
    if (!st.ok()) {
      PHALANX_LOG(Warning) << "closing connection to " << peer_name_ << ": " << st.message();
      Fail(st);
      return false;
    }
    size_t total = kFrameHeaderSize + h.length;
    if (rbuf_filled_ - pos < total) {
      if (rbuf_.size() < total) rbuf_.resize(total);
      break;
    }
    on_frame_(h, h.length ? rbuf_.data() + pos + kFrameHeaderSize : nullptr, h.length);
    if (closed_) return false;
    pos += total;
  }
  if (pos > 0) {
    std::memmove(rbuf_.data(), rbuf_.data() + pos, rbuf_filled_ - pos);
    rbuf_filled_ -= pos;
  }
  if (rbuf_.size() > (4u << 20) && rbuf_filled_ < (64u << 10)) rbuf_.resize(64 * 1024);
  return true;
}

void FramedConnection::Send(OutFrame frame) {
  if (closed_) return;
  queued_bytes_ += frame.size();
  queue_.push_back(std::move(frame));
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
  if (queue_.empty() || closed_) return;
  std::vector<asio::const_buffer> bufs;
  size_t total = 0;
  while (!queue_.empty() && bufs.size() < 256 && total < (8u << 20)) {
    writing_.push_back(std::move(queue_.front()));
    queue_.pop_front();
    const OutFrame& f = writing_.back();
    total += f.size();
    bufs.emplace_back(asio::buffer(f.bytes));
    if (f.tail_len > 0) bufs.emplace_back(asio::buffer(f.tail, f.tail_len));
  }
  auto self = shared_from_this();
  asio::async_write(socket_, bufs, [this, self, total](const boost::system::error_code& ec, size_t) {
    writing_.clear();
    queued_bytes_ -= total;
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
  if (on_close_) {
    auto cb = std::move(on_close_);
    on_close_ = nullptr;
    on_frame_ = nullptr;
    cb(why);
  }
}

void FramedConnection::Close() { Fail(Status::OK()); }

}  // namespace phalanx
