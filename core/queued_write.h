// Writing a connection's queue of outgoing bytes without blocking, shared by
// the sockets that keep one (worker/direct_io.h's connections, a static
// group's worker/group_socket.h).
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace phalanx {

// Sends what `fd` takes now of `queue` from `*written` on (MSG_DONTWAIT, no
// SIGPIPE) and moves `*written` past it. Bytes written leave the queue's
// front only once they are all of it, or at least `compact_at` and half of
// it: a socket that takes a large queue a little at a time costs one move of
// it, not one per write. `*would_block` says the socket is full (the rest
// waits for POLLOUT). Unavailable with the system's reason when the
// connection failed (the caller names the peer).
Status WriteQueued(int fd, std::string* queue, size_t* written, size_t compact_at, bool* would_block);

// The queue's bookkeeping after `*written` moved (WriteQueued's, for a queue
// written elsewhere, a shared-memory pipe): the written front goes as
// WriteQueued says.
void DropWritten(std::string* queue, size_t* written, size_t compact_at);

}  // namespace phalanx
