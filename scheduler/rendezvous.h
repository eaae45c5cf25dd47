// Rendezvous: the ranks of a static collective group meet at a key in the GCS
// (python/phalanx/_private/collective_group.py). Each rank hands in a small
// payload (where its array is, its dtype and shape); once all `world` ranks
// have, each gets every rank's payload, in rank order. Event-driven: the last
// rank's arrival publishes the record on the key's channel, which the raylets
// of the waiting ranks subscribed to before they arrived; nothing polls.
//
// A rank that gives up (its timeout) takes its arrival back and is told
// which ranks had arrived. A wait fails at once, timeout or not, when the
// node of a rank dies (NodeDied) or the process of a rank exits: its raylet
// marks it gone in the GCS (ClientGone), every raylet hears of it on one
// channel, and an arrival after that finds the mark. Not thread-safe; lives
// on the raylet's main loop.
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/proto/phalanx.pb.h"
#include "core/status.h"
#include "gcs/gcs_client.h"

namespace phalanx::scheduler {

class Rendezvous {
 public:
  using Done = std::function<void(Result<std::vector<std::string>>)>;
  // How long an incomplete rendezvous stays in the GCS after its last arrival.
  static constexpr int64_t kForgetAfterS = 86400;
  static constexpr size_t kTokenBytes = 8;

  Rendezvous(boost::asio::io_context& io, GcsClient* gcs) : io_(io), gcs_(gcs) {}

  // `done` runs once: with every rank's payload (by rank), TimedOut naming the
  // ranks that had arrived after m.timeout_ms (< 0: no limit), CollectiveFailed
  // once the node of a rank (m.rank_nodes) died or the process of a rank
  // (m.rank_clients) exited, or why the GCS could not be asked.
  void Arrive(const rpc::Rendezvous& m, Done done);
  // `node` was declared dead: every wait that counts on a rank there fails.
  void NodeDied(const std::string& node);
  // A local process that met others here exited (`why`): every wait, on any
  // raylet, that counts on it fails, and so does every later one.
  void ClientGone(const std::string& client, const std::string& why);
  size_t num_waiting() const { return keys_.size(); }

 private:
  struct Waiter {
    rpc::Rendezvous m;
    Done done;
    std::string token;  // kTokenBytes random bytes stored before the payload: this arrival's round
    bool sent = false;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  struct Key {
    bool subscribed = false;  // confirmed: arrivals may go out
    std::vector<std::shared_ptr<Waiter>> waiters;
  };
  // Sends the arrivals at `key` not sent yet, once no completion and no
  // process's exit can be missed any more.
  void SendPending(const std::string& key);
  void Send(const std::string& key, const std::shared_ptr<Waiter>& w);
  // The process `client` of some rank exited (heard from the GCS).
  void RankGone(const std::string& client, const std::string& why);
  // Gives up every wait with a rank x for which counts_on(m, x), saying why(x).
  void FailWaitsOn(const std::function<bool(const rpc::Rendezvous&, int)>& counts_on,
                   const std::function<std::string(int)>& why);
  // A round at `key` is complete: each waiter whose arrival the record holds gets its outcome.
  void Complete(const std::string& key, const std::string& record);
  // Takes w's arrival back and fails it (`why`, or a timeout naming the ranks missing if empty).
  void GiveUp(const std::string& key, const std::shared_ptr<Waiter>& w, const std::string& why = "");
  // Takes `w` off `key` (unsubscribing once none is left); false if it was not there.
  bool Remove(const std::string& key, const std::shared_ptr<Waiter>& w);

  boost::asio::io_context& io_;
  GcsClient* gcs_;
  std::unordered_map<std::string, Key> keys_;
  enum class Gone { kNotAsked, kSubscribing, kSubscribed } gone_ = Gone::kNotAsked;  // the exits' channel
};

}  // namespace phalanx::scheduler
