#include "scheduler/rendezvous.h"

#include <algorithm>
#include <sstream>

#include "core/ids.h"

namespace phalanx::scheduler {

namespace asio = boost::asio;

void Rendezvous::Arrive(const rpc::Rendezvous& m, Done done) {
  if (m.world() < 1 || m.rank() < 0 || m.rank() >= m.world()) {
    return done(Status::InvalidArgument("rank " + std::to_string(m.rank()) + " of a rendezvous of " +
                                        std::to_string(m.world()) + " ranks"));
  }
  auto w = std::make_shared<Waiter>();
  w->m = m;
  w->done = std::move(done);
  w->token = RandomBytes(kTokenBytes);
  const std::string key = m.key();
  Key& k = keys_[key];
  bool first = k.waiters.empty();
  k.waiters.push_back(w);
  if (m.timeout_ms() >= 0) {
    w->timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(m.timeout_ms()));
    std::weak_ptr<Waiter> weak = w;
    w->timer->async_wait([this, weak, key](const boost::system::error_code& ec) {
      auto w = weak.lock();
      if (!ec && w) GiveUp(key, w);
    });
  }
  if (gone_ == Gone::kNotAsked) {
    gone_ = Gone::kSubscribing;
    gcs_->SubscribeGone([this](const std::string& client, const std::string& why) { RankGone(client, why); },
                        [this] {
                          gone_ = Gone::kSubscribed;
                          std::vector<std::string> keys;
                          for (const auto& [key, k] : keys_) keys.push_back(key);
                          for (const auto& key : keys) SendPending(key);
                        });
  }
  if (k.subscribed) return SendPending(key);
  if (!first) return;  // sent once the subscription is confirmed
  gcs_->SubscribeRendezvous(
      key, [this, key](const std::string& record) { Complete(key, record); },
      [this, key] {
        auto it = keys_.find(key);
        if (it == keys_.end()) return;
        it->second.subscribed = true;
        SendPending(key);
      });
}

void Rendezvous::SendPending(const std::string& key) {
  auto it = keys_.find(key);
  if (it == keys_.end() || !it->second.subscribed || gone_ != Gone::kSubscribed) return;
  auto waiters = it->second.waiters;
  for (auto& w : waiters) {
    if (!w->sent) Send(key, w);
  }
}

void Rendezvous::Send(const std::string& key, const std::shared_ptr<Waiter>& w) {
  w->sent = true;
  std::weak_ptr<Waiter> weak = w;
  std::vector<std::string> clients(w->m.rank_clients().begin(), w->m.rank_clients().end());
  gcs_->Arrive(key, w->m.rank(), w->m.world(), w->token + w->m.payload(), kForgetAfterS, clients,
               [this, weak, key](Result<std::string> r) {
                 auto w = weak.lock();
                 if (!w) return;
                 if (!r.ok()) {
                   if (Remove(key, w)) w->done(r.status());
                   return;
                 }
                 const std::string& record = r.value();
                 if (!record.empty() && record[0] == '!') {  // a rank's process is gone: not counted
                   size_t colon = record.find(':');
                   if (Remove(key, w)) {
                     w->done(Status(StatusCode::kCollectiveFailed,
                                    "rank " + record.substr(1, colon - 1) + " is gone: " + record.substr(colon + 1)));
                   }
                   return;
                 }
                 // This arrival completed it (the record also comes on the channel: the first counts).
                 if (!record.empty()) Complete(key, record);
               });
}

void Rendezvous::Complete(const std::string& key, const std::string& record) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return;
  std::vector<std::pair<std::shared_ptr<Waiter>, Result<std::vector<std::string>>>> outcomes;
  auto& ws = it->second.waiters;
  for (auto w = ws.begin(); w != ws.end();) {
    if (!(*w)->sent || record.find((*w)->token) == std::string::npos) {
      ++w;  // an earlier round's record: not this waiter's
      continue;
    }
    auto r = GcsClient::ParseRendezvous(record, (*w)->m.world());
    if (r.ok()) {
      for (auto& e : r.value()) e.erase(0, std::min(kTokenBytes, e.size()));
    }
    outcomes.emplace_back(*w, std::move(r));
    w = ws.erase(w);
  }
  if (ws.empty()) {
    keys_.erase(it);
    gcs_->UnsubscribeRendezvous(key);
  }
  for (auto& [w, r] : outcomes) {
    if (w->timer) w->timer->cancel();
    w->done(std::move(r));
  }
}

bool Rendezvous::Remove(const std::string& key, const std::shared_ptr<Waiter>& w) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return false;
  auto& ws = it->second.waiters;
  auto pos = std::find(ws.begin(), ws.end(), w);
  if (pos == ws.end()) return false;
  ws.erase(pos);
  if (w->timer) w->timer->cancel();
  if (ws.empty()) {
    keys_.erase(it);
    gcs_->UnsubscribeRendezvous(key);
  }
  return true;
}

void Rendezvous::NodeDied(const std::string& node) {
  FailWaitsOn([&](const rpc::Rendezvous& m, int x) { return x < m.rank_nodes_size() && m.rank_nodes(x) == node; },
              [&](int x) { return "the node of rank " + std::to_string(x) + " (" + ToHex(node).substr(0, 12) + ") died"; });
}

void Rendezvous::ClientGone(const std::string& client, const std::string& why) {
  gcs_->MarkGone(client, why, kForgetAfterS);  // (RankGone follows, from the channel)
}

void Rendezvous::RankGone(const std::string& client, const std::string& why) {
  FailWaitsOn(
      [&](const rpc::Rendezvous& m, int x) { return x < m.rank_clients_size() && m.rank_clients(x) == client; },
      [&](int x) { return "rank " + std::to_string(x) + " is gone: " + why; });
}

void Rendezvous::FailWaitsOn(const std::function<bool(const rpc::Rendezvous&, int)>& counts_on,
                             const std::function<std::string(int)>& why) {
  std::vector<std::pair<std::string, std::shared_ptr<Waiter>>> failing;
  std::vector<int> ranks;
  for (const auto& [key, k] : keys_) {
    for (const auto& w : k.waiters) {
      for (int x = 0; x < w->m.world(); ++x) {
        if (!counts_on(w->m, x)) continue;
        failing.emplace_back(key, w);
        ranks.push_back(x);
        break;
      }
    }
  }
  for (size_t i = 0; i < failing.size(); ++i) GiveUp(failing[i].first, failing[i].second, why(ranks[i]));
}

void Rendezvous::GiveUp(const std::string& key, const std::shared_ptr<Waiter>& w, const std::string& dead) {
  if (!Remove(key, w)) return;  // completed meanwhile
  const rpc::Rendezvous m = w->m;
  auto done = std::move(w->done);
  gcs_->Leave(key, m.rank(), [m, done, dead](Result<std::vector<int>> r) {
    if (!dead.empty()) return done(Status(StatusCode::kCollectiveFailed, dead));
    std::ostringstream why;
    why << "not every rank arrived within " << m.timeout_ms() / 1000.0 << " s";
    if (r.ok()) {
      std::vector<bool> here(m.world(), false);
      here[m.rank()] = true;
      for (int x : r.value()) {
        if (x >= 0 && x < m.world()) here[x] = true;
      }
      int n = 0;
      std::string missing;
      for (int x = 0; x < m.world(); ++x) {
        if (here[x]) {
          ++n;
        } else {
          missing += (missing.empty() ? "" : ", ") + std::to_string(x);
        }
      }
      why << ": " << n << " of " << m.world() << " did; missing rank" << (m.world() - n > 1 ? "s " : " ")
          << missing;
    }
    done(Status(StatusCode::kTimedOut, why.str()));
  });
}

}  // namespace phalanx::scheduler
