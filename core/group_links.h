// GroupLinks: one rank's connections to the other ranks of a static group,
// opened once when the group forms (worker/group_channel.h over sockets).
// The collectives of a group (collectives/group_collectives.h) run over this
// and nothing else: no raylet, no GCS on a call's path. An interface here,
// below both, as PeerChannel is for the raylets' links.
//
// Messages are of a call (a number every rank gives the same call: the
// group's calls are made in the same order on every rank) and say what the
// sender thinks the call is (`what`: "allreduce sum float32 (1000,)"); those
// from one rank arrive in the order that rank sent them. A message whose
// `what` differs from the receiver's fails the call there, naming both, as
// soon as it arrives (whoever it was for), so ranks that disagree never wait
// for messages of another shape. A call that fails on one rank is aborted
// on the others (Abort), so no rank waits for one that gave up.
// Implementations are thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"

namespace phalanx {

class GroupLinks {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  virtual ~GroupLinks() = default;

  virtual int rank() const = 0;
  virtual int world() const = 0;
  // How errors name rank `r`: "rank 3 (pid 4711 on node 5e2a...)".
  virtual std::string Name(int r) const = 0;
  // One message as it travels (a GROUP_DATA frame's body): u32 length of
  // `what`, `what`, the bytes.
  struct Message {
    std::string body;
    const char* data() const { return body.data() + offset; }
    size_t size() const { return body.size() - offset; }
    size_t offset = 0;
  };
  static std::string Pack(const std::string& what, const void* data, size_t n) {
    std::string body(4 + what.size() + n, '\0');
    uint32_t len = static_cast<uint32_t>(what.size());
    std::memcpy(body.data(), &len, 4);
    std::memcpy(body.data() + 4, what.data(), what.size());
    if (n > 0) std::memcpy(body.data() + 4 + what.size(), data, n);
    return body;
  }
  // The `what` of a packed body; false if it is not one.
  static bool Unpack(const std::string& body, std::string* what, size_t* offset) {
    uint32_t len = 0;
    if (body.size() < 4) return false;
    std::memcpy(&len, body.data(), 4);
    if (len > body.size() - 4) return false;
    what->assign(body.data() + 4, len);
    *offset = 4 + len;
    return true;
  }

  // Sends one message of `call` to rank `to`: `n` bytes at `data` (what the
  // connection does not take at once is copied and queued: the caller may
  // change the bytes when this returns). Never waits for the peer.
  // kCollectiveFailed naming the rank when its connection is gone.
  Status Send(int to, uint64_t call, const std::string& what, const void* data, size_t n) {
    return SendParts(to, call, what, {Part{data, n}});
  }
  // One message whose bytes are `parts`, one after the other (as Send of
  // them joined, without joining them first).
  struct Part {
    const void* data;
    size_t size;
  };
  virtual Status SendParts(int to, uint64_t call, const std::string& what, const std::vector<Part>& parts) = 0;
  // Waits until every queued byte is written (taking in what arrives
  // meanwhile), by `deadline`: a call ends with this, so no peer waits for
  // bytes of a call this rank has left.
  virtual Status Flush(Deadline deadline) = 0;
  // The next message of `call` from rank `from`, by `deadline`. Fails at
  // once when the call was aborted or a message of it said another `what`
  // (kCollectiveFailed), when `from` is gone, or, with `whole_group`, when
  // any rank is gone (every rank's part is needed); kTimedOut naming `from`
  // at the deadline.
  virtual Result<Message> Recv(int from, uint64_t call, const std::string& what, Deadline deadline,
                               bool whole_group) = 0;
  // Hands back the body of a message taken from Recv, for a later message
  // to be read into (saves clearing and allocating its memory).
  virtual void Recycle(std::string body) {}
  // Tells every other rank that `call` failed here (their waits on it end
  // with `why`).
  virtual void Abort(uint64_t call, const std::string& why) = 0;
  // The call is over here: what is left of it (and arrives later) goes.
  virtual void Done(uint64_t call) = 0;
};

}  // namespace phalanx
