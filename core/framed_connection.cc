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
  ReadHeader();
}

void FramedConnection::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_buf_, kFrameHeaderSize),
                   [this, self](const boost::system::error_code& ec, size_t) {
                     if (closed_) return;
                     if (ec) {
                       Fail(ec == asio::error::eof ? Status::OK()
                                                   : Status::Unavailable(peer_name_ + ": " + ec.message()));
                       return;
                     }
                     FrameHeader h = DecodeHeader(header_buf_);
                     Status st = ValidateHeader(h);
                     if (!st.ok()) {
                       PHALANX_LOG(Warning) << "closing connection to " << peer_name_ << ": " << st.message();
                       Fail(st);
                       return;
                     }
                     ReadBody(h);
                   });
}

void FramedConnection::ReadBody(FrameHeader h) {
  if (h.length == 0) {
    on_frame_(h, nullptr, 0);
    if (!closed_) ReadHeader();
    return;
  }
  body_buf_.resize(h.length);
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(body_buf_.data(), h.length),
                   [this, self, h](const boost::system::error_code& ec, size_t) {
                     if (closed_) return;
                     if (ec) {
                       Fail(Status::Unavailable(peer_name_ + ": connection lost mid-frame: " + ec.message()));
                       return;
                     }
                     on_frame_(h, body_buf_.data(), h.length);
                     if (!closed_) ReadHeader();
                   });
}

void FramedConnection::Send(std::string frame) {
  if (closed_) return;
  queued_bytes_ += frame.size();
  queue_.push_back(std::move(frame));
  if (writing_.empty()) WriteMore();
}

void FramedConnection::WriteMore() {
  if (queue_.empty() || closed_) return;
  std::vector<asio::const_buffer> bufs;
  size_t total = 0;
  while (!queue_.empty() && bufs.size() < 256 && total < (8u << 20)) {
    writing_.push_back(std::move(queue_.front()));
    queue_.pop_front();
    total += writing_.back().size();
    bufs.emplace_back(asio::buffer(writing_.back()));
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
  PHALANX_CHECK(writing_.empty() && queue_.empty()) << "SendWithFd with writes in flight";
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
    Send(frame.substr(n));  // the rest as ordinary bytes
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
