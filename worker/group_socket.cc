#include "worker/group_socket.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/queued_write.h"

namespace phalanx {

namespace {
constexpr size_t kRawChunk = 1 << 16;
constexpr size_t kCompactAt = 1 << 20;  // written bytes dropped from the queue's front past this
constexpr size_t kBodyStep = 1 << 20;   // a body grows by this as its bytes come
constexpr size_t kMaxIov = 64;          // a frame of more pieces is queued whole first
}  // namespace

GroupSocket::GroupSocket(DirectIo::Socket socket)
    : fd_(socket.fd), peer_(std::move(socket.peer)), tls_(std::move(socket.tls)), tcp_(socket.tcp) {}

GroupSocket::~GroupSocket() {
  if (fd_ >= 0) ::close(fd_);
  if (passed_fd_ >= 0) ::close(passed_fd_);
}

bool GroupSocket::has_input() const { return (tls_ && tls_->has_input()) || (in_pipe_ && in_pipe_->readable()); }

Status GroupSocket::Write(FrameHeader h, const std::string& head, const std::vector<Part>& parts) {
  char header[kFrameHeaderSize];
  std::vector<Part> pieces;  // the frame's bytes in order
  pieces.reserve(parts.size() + 2);
  pieces.push_back({header, sizeof(header)});
  pieces.push_back({head.data(), head.size()});
  size_t total = 0;
  for (const auto& p : parts) {
    if (p.size > 0) pieces.push_back(p);
    total += p.size;
  }
  h.length = static_cast<uint32_t>(head.size() + total);
  EncodeHeader(h, header);
  total += sizeof(header) + head.size();
  if (tls_) {
    for (const auto& p : pieces) {
      if (p.size > 0) PHALANX_RETURN_IF_ERROR(tls_->Write(static_cast<const char*>(p.data), p.size));
    }
    tls_->TakeOutput(&out_);
    return SendQueued();
  }
  const bool was_pending = pending();
  size_t sent = 0;  // bytes of the frame gone (into the pipe or the socket)
  if (!was_pending && out_pipe_) {  // the caller's bytes straight into the pipe
    for (const auto& p : pieces) {
      auto k = out_pipe_->Put(static_cast<const char*>(p.data), p.size);
      if (!k.ok()) return Status::Unavailable(peer_ + ": " + k.status().message());
      sent += k.value();
      if (k.value() < p.size) break;
    }
    if (sent > 0 && out_pipe_->TakeReaderSleeping()) Ring();
  } else if (!was_pending && pieces.size() <= kMaxIov) {  // straight from the caller's bytes, in one call
    iovec iov[kMaxIov];
    for (size_t i = 0; i < pieces.size(); ++i) iov[i] = {const_cast<void*>(pieces[i].data), pieces[i].size};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = pieces.size();
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
  }
  if (sent == total) return Status::OK();
  // The rest waits in the queue, in order.
  size_t at = 0;
  for (const auto& p : pieces) {
    size_t skip = sent > at ? sent - at : 0;
    if (sent < at + p.size) out_.append(static_cast<const char*>(p.data) + skip, p.size - skip);
    at += p.size;
  }
  return was_pending ? SendQueued() : Status::OK();
}

Status GroupSocket::OfferPipes(FrameHeader h, const std::string& head, size_t capacity) {
  if (pending()) return Write(h, head, nullptr, 0);  // (not a first frame: the socket carries on)
  int fd = -1;
  auto pair = ShmPipe::CreatePair(&fd, capacity);
  if (!pair.ok()) return Write(h, head, nullptr, 0);  // (no shared memory: the socket carries on)
  h.length = static_cast<uint32_t>(head.size());
  char header[kFrameHeaderSize];
  EncodeHeader(h, header);
  iovec iov[2] = {{header, sizeof(header)}, {const_cast<char*>(head.data()), head.size()}};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  ssize_t w;
  do {
    w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (w < 0 && errno == EINTR);
  ::close(fd);
  // A fresh socket takes a first frame whole; anything else: this socket is no good.
  if (w != static_cast<ssize_t>(sizeof(header) + head.size())) {
    return Status::Unavailable("cannot write to " + peer_ + ": " + (w < 0 ? std::strerror(errno) : "short write"));
  }
  out_pipe_ = std::move(pair.value().out);
  in_pipe_ = std::move(pair.value().in);
  return Status::OK();
}

Status GroupSocket::UsePassedPipes() {
  int fd = passed_fd_;
  passed_fd_ = -1;
  auto pair = ShmPipe::MapPair(fd);
  ::close(fd);
  if (!pair.ok()) return Status::Unavailable(peer_ + ": " + pair.status().message());
  if (pending()) return Status::Unavailable(peer_ + ": bytes were queued on the socket when the pipes came");
  out_pipe_ = std::move(pair.value().out);
  in_pipe_ = std::move(pair.value().in);
  return Status::OK();
}

void GroupSocket::Ring() {
  char b = 0;
  while (::send(fd_, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR) {
  }
  // (EAGAIN: doorbells the peer has not read yet wake it anyway; a broken
  // socket shows on the next read.)
}

bool GroupSocket::PrepareToSleep() {
  if (!in_pipe_) return true;
  in_pipe_->set_reader_sleeping(true);
  if (pending()) out_pipe_->set_writer_sleeping(true);
  if (in_pipe_->readable() || can_flush()) {
    Woke();
    return false;
  }
  return true;
}

void GroupSocket::Woke() {
  if (!in_pipe_) return;
  in_pipe_->set_reader_sleeping(false);
  out_pipe_->set_writer_sleeping(false);
}

Status GroupSocket::Flush() { return SendQueued(); }

Status GroupSocket::SendQueued() {
  if (out_pipe_) {
    if (!pending()) return Status::OK();
    auto k = out_pipe_->Put(out_.data() + written_, out_.size() - written_);
    if (!k.ok()) return Status::Unavailable(peer_ + ": " + k.status().message());
    written_ += k.value();
    DropWritten(&out_, &written_, kCompactAt);
    if (k.value() > 0 && out_pipe_->TakeReaderSleeping()) Ring();
    return Status::OK();
  }
  bool full;
  Status st = WriteQueued(fd_, &out_, &written_, kCompactAt, &full);
  if (!st.ok()) return Status::Unavailable("cannot write to " + peer_ + ": " + st.message());
  return Status::OK();
}

Status GroupSocket::Read(std::vector<Frame>* out, SpareBodies* spares) {
  return tls_ ? ReadTls(out) : ReadPlain(out, spares);
}

Status GroupSocket::ReadPlain(std::vector<Frame>* out, SpareBodies* spares) {
  while (true) {
    char* into;
    size_t want;
    if (header_got_ < kFrameHeaderSize) {
      into = header_ + header_got_;
      want = kFrameHeaderSize - header_got_;
    } else {
      // Memory follows the bytes: the body grows a chunk at a time as they come.
      size_t have = frame_.body.size();
      if (body_got_ == have) {  // (by what is in the pipe already when more than a step: one allocation)
        size_t step = std::max(kBodyStep, in_pipe_ ? in_pipe_->available() : 0);
        frame_.body.resize(std::min<size_t>(frame_.header.length, have + step));
      }
      into = frame_.body.data() + body_got_;
      want = frame_.body.size() - body_got_;
    }
    size_t r = 0;
    if (want > 0) {
      PHALANX_ASSIGN_OR_RETURN(r, Take(into, want));
      if (r == 0) return Status::OK();
    }
    if (header_got_ < kFrameHeaderSize) {
      header_got_ += static_cast<size_t>(r);
      if (header_got_ < kFrameHeaderSize) continue;
      frame_.header = DecodeHeader(header_);
      Status valid = ValidateHeader(frame_.header);
      if (!valid.ok()) return Status::Unavailable(peer_ + " sent a malformed frame: " + valid.message());
      // A large body goes into a used one: no allocation, no clearing.
      frame_.body = spares != nullptr ? spares->Take(frame_.header.length) : std::string();
      if (frame_.body.size() > frame_.header.length) frame_.body.resize(frame_.header.length);
      body_got_ = 0;
    } else {
      body_got_ += static_cast<size_t>(r);
    }
    if (body_got_ == frame_.header.length) {
      out->push_back(std::move(frame_));
      frame_ = Frame();
      header_got_ = 0;
      body_got_ = 0;
      if (awaiting_pipes_) {  // the first frame: the bytes after it come through the pipes it brought, if any
        awaiting_pipes_ = false;
        if (passed_fd_ >= 0) PHALANX_RETURN_IF_ERROR(UsePassedPipes());
      }
    }
  }
}

Result<size_t> GroupSocket::Take(char* into, size_t want) {
  if (!in_pipe_) return TakeFromSocket(into, want);
  for (int pass = 0; pass < 2; ++pass) {
    auto got = in_pipe_->Get(into, want);
    if (!got.ok()) return Status::Unavailable(peer_ + ": " + got.status().message());
    const size_t k = got.value();
    if (k > 0) {
      if (in_pipe_->TakeWriterSleeping()) Ring();  // (room for the peer's queued bytes)
      return k;
    }
    if (pass == 1) break;
    // Empty: the doorbells that woke this end go, and a closed socket says the peer is gone.
    char bells[256];
    while (true) {
      ssize_t r = ::recv(fd_, bells, sizeof(bells), MSG_DONTWAIT);
      if (r > 0) continue;
      if (r == 0) return Status::Unavailable(peer_ + " closed the connection");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return Status::Unavailable(peer_ + ": " + std::strerror(errno));
    }
  }
  return size_t{0};
}

Result<size_t> GroupSocket::TakeFromSocket(char* into, size_t want) {
  ssize_t r;
  while (true) {
    if (awaiting_pipes_ && passed_fd_ < 0) {  // (the first frame's bytes may bring the pipes' fd)
      iovec iov{into, want};
      char control[CMSG_SPACE(sizeof(int))];
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      r = ::recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      for (cmsghdr* c = r > 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int fd;
        std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
        if (passed_fd_ < 0) {
          passed_fd_ = fd;
        } else {
          ::close(fd);  // (one pair is all a first frame brings)
        }
      }
    } else {
      r = ::recv(fd_, into, want, MSG_DONTWAIT);
    }
    if (r > 0) return static_cast<size_t>(r);
    if (r == 0) return Status::Unavailable(peer_ + " closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return Status::Unavailable(peer_ + ": " + std::strerror(errno));
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
