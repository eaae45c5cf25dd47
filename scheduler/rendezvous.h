// Rendezvous: the ranks of a static collective group meet at a key in the GCS
// (python/phalanx/_private/collective_group.py). Each rank hands in a small
// payload (where its array is, its dtype and shape); once all `world` ranks
// have, each gets every rank's payload, in rank order. Event-driven: the last
// rank's arrival publishes the record on the key's channel, which the raylets
// of the waiting ranks subscribed to before they arrived; nothing polls.
//
// A rank that gives up (its timeout) takes its arrival back and is told
// which ranks had arrived. Not thread-safe; lives on the raylet's main loop.
#pragma once

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/gcs_client.h"
#include "core/proto/phalanx.pb.h"
#include "core/status.h"

namespace phalanx::scheduler {

class Rendezvous {
 public:
  using Done = std::function<void(Result<std::vector<std::string>>)>;
  // How long an incomplete rendezvous stays in the GCS after its last arrival.
  static constexpr int64_t kForgetAfterS = 86400;

  Rendezvous(boost::asio::io_context& io, GcsClient* gcs) : io_(io), gcs_(gcs) {}

  // `done` runs once: with every rank's payload (by rank), TimedOut naming the
  // ranks that had arrived after m.timeout_ms (< 0: no limit), CollectiveFailed
  // once the node of a rank (m.rank_nodes) died, or why the GCS could not be asked.
  void Arrive(const rpc::Rendezvous& m, Done done);
  // `node` was declared dead: every wait that counts on a rank there fails.
  void NodeDied(const std::string& node);
  size_t num_waiting() const { return keys_.size(); }

 private:
  struct Waiter {
    rpc::Rendezvous m;
    Done done;
    bool sent = false;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  struct Key {
    bool subscribed = false;  // confirmed: arrivals may go out
    std::vector<std::shared_ptr<Waiter>> waiters;
  };
  void Send(const std::string& key, const std::shared_ptr<Waiter>& w);
  // The rendezvous at `key` is complete: every waiter gets its outcome.
  void Complete(const std::string& key, const std::string& record);
  // Takes w's arrival back and fails it (`why`, or a timeout naming the ranks missing if empty).
  void GiveUp(const std::string& key, const std::shared_ptr<Waiter>& w, const std::string& why = "");
  // Takes `w` off `key` (unsubscribing once none is left); false if it was not there.
  bool Remove(const std::string& key, const std::shared_ptr<Waiter>& w);

  boost::asio::io_context& io_;
  GcsClient* gcs_;
  std::unordered_map<std::string, Key> keys_;
};

}  // namespace phalanx::scheduler
