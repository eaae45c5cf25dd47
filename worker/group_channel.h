// GroupChannel: one rank's connections to the other ranks of a static group
// (GroupLinks, core/group_links.h, over sockets), opened once at init_group and
// used by every call of the group until destroy_group.
//
// Forming: Open listens (a Unix socket in the session folder for ranks on
// this node, TCP on the node's address for the others; DirectIo accepts and
// authenticates: the cluster token, and TLS over TCP under --tls) and says
// where (addresses()); the ranks swap addresses at init_group's one meeting
// in the GCS; then Connect: each rank dials every lower rank and sends a
// GROUP_HELLO (group, the forming's nonce, its rank); each lower rank checks
// the hello (another group, an older forming, a rank already connected or
// not higher: closed), takes the socket out of DirectIo's poll thread and
// answers with its own hello (on this node, with a pair of shared-memory
// pipes that carry the pair's frames from then on: worker/shm_pipe.h; the
// socket stays for doorbells and to say the rank is gone). From then on
// each pair has one connection, read and written by the thread making the
// call (GroupSocket), with no thread between the connection and the call.
//
// A call's progress: while it waits for a message (Recv) or for its bytes to
// go out (Flush), the calling thread polls every connection, files whole
// GROUP_DATA messages by (rank, call), notes GROUP_ABORTs, and writes what
// is queued. A connection that closes (the rank's process exited, left the
// group, or keepalive found its node gone) makes the rank gone: waits on it,
// and on any whole-group call, end at once naming it. Between calls nothing
// reads: a peer ahead by a call waits in its own call for this one. Memory:
// what a peer sends ahead is kept until taken.
// One call at a time (the group's calls are sequential); thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/group_links.h"
#include "core/blocking_connection.h"
#include "core/status.h"
#include "core/tls.h"
#include "worker/direct_io.h"
#include "worker/group_socket.h"
#include "worker/spare_bodies.h"

namespace phalanx {

class GroupChannel : public GroupLinks {
 public:
  struct Options {
    std::string token;                      // the cluster token every connection proves
    std::shared_ptr<const TlsContext> tls;  // TLS for TCP (null: plain)
    std::string node_id;                    // this process's node
    std::string node_address;               // where TCP listens ("": no TCP)
    std::string session_dir;                // where the Unix socket goes ("": none)
    std::string group;
    int rank = 0;
    int world = 1;
    // Checked every ~100 ms of a wait; a non-OK status ends the wait with it
    // (a pending KeyboardInterrupt). May be empty.
    std::function<Status()> interrupted;
  };
  // One rank's way in: its node, and its addresses ("unix:PATH", "tcp:HOST:PORT").
  struct Peer {
    std::string node_id;
    std::vector<std::string> addresses;
    std::string name;  // for errors: "rank 3 (pid 4711 on node 5e2a...)"
  };

  static Result<std::unique_ptr<GroupChannel>> Open(Options options);
  ~GroupChannel() override;  // closes every connection (the other ranks see this rank gone)

  const std::vector<std::string>& addresses() const { return addresses_; }
  // Connects every pair, all within `timeout_ms`; TimedOut names the ranks
  // not connected. `peers`: every rank's, this one's included; `nonce`:
  // this forming's (the meeting's).
  Status Connect(const std::vector<Peer>& peers, const std::string& nonce, int64_t timeout_ms);

  int rank() const override { return o_.rank; }
  int world() const override { return o_.world; }
  std::string Name(int r) const override;
  Status SendParts(int to, uint64_t call, const std::string& what, const std::vector<Part>& parts) override;
  Status Flush(Deadline deadline) override;
  Result<Message> Recv(int from, uint64_t call, const std::string& what, Deadline deadline,
                       bool whole_group) override;
  void Recycle(std::string body) override;
  void Abort(uint64_t call, const std::string& why) override;
  void Done(uint64_t call) override;
  // The rank a call waits for now (-1: none), for the stuck-call report.
  int waiting_for() const { return waiting_for_.load(); }
  // Where bodies handed out come back to (Recycle, or whoever keeps a body
  // past the channel's calls).
  std::shared_ptr<SpareBodies> spare_bodies() const { return spares_; }
  // How many of this rank's connections go through shared memory.
  int shared_memory_links() const;

 private:
  explicit GroupChannel(Options options);
  // DirectIo's poll thread, while forming: hellos on accepted connections.
  void OnFrames(uint64_t conn, std::vector<Frame>& frames);
  void OnClose(uint64_t conn, const Status& why);
  // A hello on accepted `conn`: binds it to its rank, or closes it. REQUIRES mu_.
  void CheckHello(uint64_t conn, const std::string& body);
  Status Dial(int r, const Peer& peer, Deadline deadline);
  Status Accepted(int r, uint64_t conn, Deadline deadline);
  // This rank's GROUP_HELLO on the connection to `r` (a dial, or the answer to one).
  Status SendHello(int r);

  // The calling thread's progress: one poll of every connection (until
  // `until` at the latest), filing what arrives and writing what is queued.
  // Error only for an interrupt.
  Status Poll(Deadline until);
  void Dispatch(int from, std::vector<Frame>& frames);
  void Gone(int r, const std::string& why);
  // A call's message from `from`: filed, or failing the call when its `what`
  // is not this rank's.
  void File(int from, uint64_t call, std::string body);
  void FailCall(uint64_t call, const std::string& why) { failed_.emplace(call, why); }
  std::string Mismatch(int from, const std::string& theirs, const std::string& ours) const;

  const Options o_;
  std::vector<std::string> addresses_;
  std::string unix_path_;
  DirectIo io_;  // listens, accepts and authenticates; dials

  // Forming (shared with DirectIo's poll thread).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string nonce_;
  std::vector<std::string> names_;                              // by rank
  std::vector<uint64_t> accepted_;                              // by higher rank: its DirectIo connection
  std::vector<std::pair<uint64_t, std::string>> early_hellos_;  // accepted before Connect knew the nonce

  // Calls (the calling thread's, under call_mu_).
  mutable std::mutex call_mu_;
  std::vector<std::unique_ptr<GroupSocket>> links_;  // by rank; null: itself, or gone
  std::vector<bool> hello_from_;                     // by lower rank: its answer came
  std::vector<std::string> gone_;                    // by rank: why it is gone ("" while connected)
  std::map<std::pair<int, uint64_t>, std::deque<std::string>> inbox_;  // (rank, call) -> bodies
  std::unordered_map<uint64_t, std::string> expected_;  // call -> this rank's `what`, while in it
  std::unordered_map<uint64_t, std::string> failed_;    // call -> why (aborted, or a mismatch)
  std::set<uint64_t> finished_;                         // calls Done here (the latest kKeepFinished)
  std::deque<uint64_t> finished_order_;
  std::shared_ptr<SpareBodies> spares_ = std::make_shared<SpareBodies>();  // bodies to read into again
  std::atomic<int> waiting_for_{-1};
  Clock::time_point spin_until_;  // a wait polls without sleeping until then
};

}  // namespace phalanx
