#include "worker/group_socket.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/queued_write.h"

namespace phalanx {

namespace {
constexpr size_t kRawChunk = 1 << 16;
constexpr size_t kCompactAt = 1 << 20;  // written bytes dropped from the queue's front past this
constexpr size_t kBodyStep = 1 << 20;   // a body grows by this as its bytes come
}  // namespace

GroupSocket::GroupSocket(DirectIo::Socket socket)
    : fd_(socket.fd), peer_(std::move(socket.peer)), tls_(std::move(socket.tls)) {}

GroupSocket::~GroupSocket() {
  if (fd_ >= 0) ::close(fd_);
}

bool GroupSocket::has_input() const { return tls_ && tls_->has_input(); }

Status GroupSocket::Write(FrameHeader h, const std::string& head, const void* data, size_t n) {
  h.length = static_cast<uint32_t>(head.size() + n);
  char header[kFrameHeaderSize];
  EncodeHeader(h, header);
  if (tls_) {
    PHALANX_RETURN_IF_ERROR(tls_->Write(header, sizeof(header)));
    if (!head.empty()) PHALANX_RETURN_IF_ERROR(tls_->Write(head.data(), head.size()));
    if (n > 0) PHALANX_RETURN_IF_ERROR(tls_->Write(static_cast<const char*>(data), n));
    tls_->TakeOutput(&out_);
    return SendQueued();
  }
  const size_t total = sizeof(header) + head.size() + n;
  size_t sent = 0;
  if (!pending()) {  // straight from the caller's bytes: header, head and data in one call
    iovec iov[3] = {{header, sizeof(header)},
                    {const_cast<char*>(head.data()), head.size()},
                    {const_cast<void*>(data), n}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 3;
    while (true) {
      ssize_t w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w >= 0) {
        sent = static_cast<size_t>(w);
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return Status::Unavailable("cannot write to " + peer_ + ": " + std::strerror(errno));
    }
    if (sent == total) return Status::OK();
  }
  // The rest waits in the queue, in order.
  auto append_from = [&](const char* p, size_t len, size_t at) {  // the part of [at, at+len) not yet sent
    if (sent < at + len) out_.append(p + (sent > at ? sent - at : 0), len - (sent > at ? sent - at : 0));
  };
  append_from(header, sizeof(header), 0);
  append_from(head.data(), head.size(), sizeof(header));
  append_from(static_cast<const char*>(data), n, sizeof(header) + head.size());
  return Status::OK();
}

Status GroupSocket::Flush() { return SendQueued(); }

Status GroupSocket::SendQueued() {
  bool full;
  Status st = WriteQueued(fd_, &out_, &written_, kCompactAt, &full);
  if (!st.ok()) return Status::Unavailable("cannot write to " + peer_ + ": " + st.message());
  return Status::OK();
}

Status GroupSocket::Read(std::vector<Frame>* out, std::vector<std::string>* spares) {
  return tls_ ? ReadTls(out) : ReadPlain(out, spares);
}

Status GroupSocket::ReadPlain(std::vector<Frame>* out, std::vector<std::string>* spares) {
  while (true) {
    char* into;
    size_t want;
    if (header_got_ < kFrameHeaderSize) {
      into = header_ + header_got_;
      want = kFrameHeaderSize - header_got_;
    } else {
      // Memory follows the bytes: the body grows a chunk at a time as they come.
      size_t have = frame_.body.size();
      if (body_got_ == have) frame_.body.resize(std::min<size_t>(frame_.header.length, have + kBodyStep));
      into = frame_.body.data() + body_got_;
      want = frame_.body.size() - body_got_;
    }
    ssize_t r = want == 0 ? 0 : ::recv(fd_, into, want, MSG_DONTWAIT);
    if (want > 0) {
      if (r == 0) return Status::Unavailable(peer_ + " closed the connection");
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::OK();
        return Status::Unavailable(peer_ + ": " + std::strerror(errno));
      }
    }
    if (header_got_ < kFrameHeaderSize) {
      header_got_ += static_cast<size_t>(r);
      if (header_got_ < kFrameHeaderSize) continue;
      frame_.header = DecodeHeader(header_);
      Status valid = ValidateHeader(frame_.header);
      if (!valid.ok()) return Status::Unavailable(peer_ + " sent a malformed frame: " + valid.message());
      if (spares != nullptr && !spares->empty()) {  // a used body: no allocation, no clearing
        frame_.body.swap(spares->back());
        spares->pop_back();
        if (frame_.body.size() > frame_.header.length) frame_.body.resize(frame_.header.length);
      } else {
        frame_.body.clear();
      }
      body_got_ = 0;
    } else {
      body_got_ += static_cast<size_t>(r);
    }
    if (body_got_ == frame_.header.length) {
      out->push_back(std::move(frame_));
      frame_ = Frame();
      header_got_ = 0;
      body_got_ = 0;
    }
  }
}

Status GroupSocket::TakeFrames(std::vector<Frame>* out) {
  while (true) {
    FrameHeader h;
    const char* body = nullptr;
    auto next = reader_.Next(&h, &body);
    if (!next.ok()) return Status::Unavailable(peer_ + " sent a malformed frame: " + next.status().message());
    if (!next.value()) return Status::OK();
    out->push_back(Frame{h, std::string(body, h.length)});
  }
}

Status GroupSocket::ReadTls(std::vector<Frame>* out) {
  while (true) {
    if (raw_.empty()) raw_.resize(kRawChunk);
    ssize_t r = ::recv(fd_, raw_.data(), raw_.size(), MSG_DONTWAIT);
    if (r == 0) return Status::Unavailable(peer_ + " closed the connection");
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Status::Unavailable(peer_ + ": " + std::strerror(errno));
    }
    if (r > 0) tls_->Feed(raw_.data(), static_cast<size_t>(r));
    size_t got = 0;
    while (true) {
      PHALANX_RETURN_IF_ERROR(TakeFrames(out));  // (a large frame's space ends where it does)
      PHALANX_ASSIGN_OR_RETURN(auto space, reader_.Space());
      PHALANX_ASSIGN_OR_RETURN(size_t n, tls_->Read(space.first, space.second));
      if (n == 0) break;
      reader_.Commit(n);
      got += n;
    }
    if (tls_->has_output()) {  // (a key update's reply)
      tls_->TakeOutput(&out_);
      PHALANX_RETURN_IF_ERROR(SendQueued());
    }
    PHALANX_RETURN_IF_ERROR(TakeFrames(out));
    if (r <= 0 && got == 0) return Status::OK();
  }
}

}  // namespace phalanx
