// GroupChannel: one rank's connections to the other ranks of a static group
// (collectives::GroupLinks over sockets), opened once at init_group and
// used by every call of the group until destroy_group.
//
// Forming: Open listens (a Unix socket in the session folder for ranks on
// this node, TCP on the node's address for the others) and says where
// (addresses()); the ranks swap addresses at init_group's one meeting in
// the GCS; then Connect: each rank connects to every lower rank and accepts
// the higher ones, so each pair has one connection. Every connection opens
// with the cluster-token handshake (and TLS over TCP under --tls: DirectIo),
// then a GROUP_HELLO naming the group, the forming's nonce and the rank; a
// connection that says anything else first, or names another group, forming
// or a rank that is not higher, is closed.
//
// Then GROUP_DATA frames carry the calls' messages, filed by (rank, call)
// for Recv; GROUP_ABORT says a call failed on its sender. A connection that
// closes (the rank's process exited, or keepalive found its machine gone)
// makes the rank gone: waits on it, and on any whole-group call, end at once
// naming it. Memory: what a peer sends ahead is kept until taken (calls come
// in one order on every rank, so a rank is at most a call or so ahead).
// Thread-safe.
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

#include "collectives/group_links.h"
#include "core/blocking_connection.h"
#include "core/status.h"
#include "core/tls.h"
#include "worker/direct_io.h"

namespace phalanx {

class GroupChannel : public collectives::GroupLinks {
 public:
  struct Options {
    std::string token;                     // the cluster token every connection proves
    std::shared_ptr<const TlsContext> tls;  // TLS for TCP (null: plain)
    std::string node_id;                   // this process's node
    std::string node_address;              // where TCP listens ("": no TCP)
    std::string session_dir;               // where the Unix socket goes ("": none)
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
  // Connects to every lower rank, waits for every higher one, all within
  // `timeout_ms`; TimedOut names the ranks not connected. `peers`: every
  // rank's, this one's included; `nonce`: this forming's (the meeting's).
  Status Connect(const std::vector<Peer>& peers, const std::string& nonce, int64_t timeout_ms);

  int rank() const override { return o_.rank; }
  int world() const override { return o_.world; }
  std::string Name(int r) const override;
  Status Send(int to, uint64_t call, const std::string& what, const void* data, size_t n) override;
  Result<Message> Recv(int from, uint64_t call, const std::string& what, Deadline deadline,
                       bool whole_group) override;
  void Abort(uint64_t call, const std::string& why) override;
  void Done(uint64_t call) override;
  // The rank a Recv waits for now (-1: none), for the stuck-call report.
  int waiting_for() const { return waiting_for_.load(); }

 private:
  explicit GroupChannel(Options options);
  void OnFrames(uint64_t conn, std::vector<Frame>& frames);
  void OnClose(uint64_t conn, const Status& why);
  // A hello on accepted `conn`: binds it to its rank, or closes it. REQUIRES mu_.
  void CheckHello(uint64_t conn, const std::string& body);
  // A call's message from `from`: filed, or failing the call when its `what`
  // is not this rank's. REQUIRES mu_.
  void File(int from, uint64_t call, std::string body);
  void FailCall(uint64_t call, const std::string& why);  // REQUIRES mu_
  std::string NameLocked(int r) const;                   // REQUIRES mu_
  // Why a call fails when rank `from` said `theirs` and this rank `ours`. REQUIRES mu_.
  std::string Mismatch(int from, const std::string& theirs, const std::string& ours) const;
  bool Finished(uint64_t call) const;                    // REQUIRES mu_

  const Options o_;
  std::atomic<int> waiting_for_{-1};
  std::vector<std::string> addresses_;
  std::string unix_path_;
  DirectIo io_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string nonce_;                                  // set by Connect
  std::vector<Peer> peers_;                            // set by Connect
  std::vector<uint64_t> conn_of_;                      // by rank; 0: not connected
  std::unordered_map<uint64_t, int> rank_of_;          // connections bound to a rank
  std::vector<std::pair<uint64_t, std::string>> early_hellos_;  // accepted before Connect knew the nonce
  std::vector<std::string> gone_;                      // by rank: why it is gone ("" while connected)
  std::map<std::pair<int, uint64_t>, std::deque<std::string>> inbox_;  // (rank, call) -> bodies
  std::unordered_map<uint64_t, std::string> expected_;  // call -> this rank's `what`, while in it
  std::unordered_map<uint64_t, std::string> failed_;    // call -> why (aborted, or a mismatch)
  std::set<uint64_t> finished_;                         // calls Done here (the latest kKeepFinished)
  std::deque<uint64_t> finished_order_;
};

}  // namespace phalanx
