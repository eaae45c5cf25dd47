#include "core/queued_write.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace phalanx {

Status WriteQueued(int fd, std::string* queue, size_t* written, size_t compact_at, bool* would_block) {
  *would_block = false;
  size_t off = *written;
  while (off < queue->size()) {
    ssize_t n = ::send(fd, queue->data() + off, queue->size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        *would_block = true;
        break;
      }
      *written = off;
      return Status::Unavailable(std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  *written = off;
  DropWritten(queue, written, compact_at);
  return Status::OK();
}

void DropWritten(std::string* queue, size_t* written, size_t compact_at) {
  if (*written == queue->size()) {
    queue->clear();
    *written = 0;
  } else if (*written >= compact_at && *written >= queue->size() / 2) {
    queue->erase(0, *written);
    *written = 0;
  }
}

}  // namespace phalanx
