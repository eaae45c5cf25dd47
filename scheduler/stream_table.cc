#include "scheduler/stream_table.h"

#include <limits>

#include "core/ids.h"

namespace phalanx::scheduler {

namespace {
constexpr size_t kClosedRemembered = 4096;
constexpr uint64_t kAll = std::numeric_limits<uint64_t>::max();
}  // namespace

std::string StreamItemId(const std::string& task_id, uint64_t k) {
  return MakeObjectId(task_id, static_cast<uint32_t>(2 + k));
}

StreamTable::~StreamTable() {
  for (auto& [tid, s] : streams_) {
    for (auto* list : {&s.readers, &s.producers}) {
      for (auto& w : *list) {
        if (w->timer) w->timer->cancel();
      }
    }
  }
}

void StreamTable::Open(const std::string& task_id, const std::string& consumer, bool dynamic) {
  Stream& s = streams_[task_id];
  s.task_id = task_id;
  s.consumer = consumer;
  s.dynamic = dynamic;
  by_consumer_[consumer].insert(task_id);
  // The return is ready (or lost) once the task is over, however it ended:
  // a producer that died says no last word.
  objects_->OnLocated(MakeObjectId(task_id, 1), [this, task_id] { OnReturned(task_id); });
}

void StreamTable::OnItem(const std::string& task_id, uint64_t k) {
  auto it = streams_.find(task_id);
  if (it == streams_.end() || k >= kMaxStreamItems) return;  // gone: whoever holds the item keeps it
  Stream& s = it->second;
  if (k < s.available || s.ahead.count(k)) return;  // a retried producer's item made before
  if (k == s.available) {
    ++s.available;
    while (!s.ahead.empty() && *s.ahead.begin() == s.available) {
      s.ahead.erase(s.ahead.begin());
      ++s.available;
    }
  } else {
    s.ahead.insert(k);
  }
  if (!s.dropped && k >= s.consumed && !(s.dynamic && s.returned)) {
    objects_->AddRef(StreamItemId(task_id, k));
    s.held.insert(k);
  }
  WakeReaders(s, false);
}

void StreamTable::OnEnd(const std::string& task_id, uint64_t count) {
  auto it = streams_.find(task_id);
  if (it == streams_.end()) return;
  it->second.end_known = true;
  it->second.end_count = count;
  WakeReaders(it->second, false);
  MaybeErase(task_id);
}

void StreamTable::OnReturned(const std::string& task_id) {
  auto it = streams_.find(task_id);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  s.returned = true;
  rpc::ObjectValue v;
  objects_->Describe(MakeObjectId(task_id, 1), &v, /*pin=*/false);
  s.lost = v.state() == rpc::OBJ_LOST;
  // A dynamic generator's return holds its items from now on (or, lost,
  // tells the caller why there are none to read).
  if (s.dynamic) Release(s, kAll);
  WakeReaders(s, true);
  MaybeErase(task_id);
}

void StreamTable::Release(Stream& s, uint64_t below) {
  while (!s.held.empty() && *s.held.begin() < below) {
    uint64_t k = *s.held.begin();
    s.held.erase(s.held.begin());
    objects_->RemoveRef(StreamItemId(s.task_id, k));
  }
}

void StreamTable::Next(const std::string& task_id, const std::string& by, uint64_t consumed, int64_t timeout_ms,
                       NextReply reply) {
  auto it = streams_.find(task_id);
  if (it == streams_.end()) {  // over and forgotten: its return says how it ended
    rpc::StreamNextReply r;
    r.set_available(consumed);
    r.set_ended(true);
    return reply(r);
  }
  Stream& s = it->second;
  if (s.consumer != by) consumed = s.consumed;  // only its caller reads it
  if (consumed > s.consumed) {
    Release(s, consumed);
    s.consumed = consumed;
    WakeProducers(s, false);
  }
  if (s.available > consumed || Ended(s) || s.dropped) {
    rpc::StreamNextReply r;
    r.set_available(s.available);
    r.set_ended(Ended(s) || s.dropped);
    reply(r);
    MaybeErase(task_id);
    return;
  }
  auto w = std::make_shared<Waiter>();
  w->need = consumed;
  w->next = std::move(reply);
  Park(s.readers, w, timeout_ms, [this, task_id, w] {
    auto it = streams_.find(task_id);
    if (it == streams_.end()) return;
    auto& list = it->second.readers;
    for (auto p = list.begin(); p != list.end(); ++p) {
      if (*p != w) continue;
      list.erase(p);
      rpc::StreamNextReply r;
      r.set_available(it->second.available);
      r.set_ended(Ended(it->second));
      w->next(r);
      return;
    }
  });
}

void StreamTable::Drop(const std::string& task_id, const std::string& by) {
  auto it = streams_.find(task_id);
  if (it == streams_.end() || it->second.consumer != by) return;
  DropStream(task_id);
}

void StreamTable::DropStream(const std::string& task_id) {
  auto it = streams_.find(task_id);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  s.dropped = true;
  Release(s, kAll);
  WakeReaders(s, true);
  WakeProducers(s, true);
  MaybeErase(task_id);
}

void StreamTable::DropAllOf(const std::string& consumer) {
  auto it = by_consumer_.find(consumer);
  if (it == by_consumer_.end()) return;
  std::vector<std::string> tids(it->second.begin(), it->second.end());
  for (const auto& tid : tids) DropStream(tid);
}

void StreamTable::Credit(const std::string& task_id, uint64_t need, int64_t timeout_ms, CreditReply reply) {
  auto it = streams_.find(task_id);
  if (it == streams_.end()) {
    rpc::StreamCreditReply r;
    if (closed_.count(task_id)) {
      r.set_dropped(true);
      return reply(r);
    }
    // Not opened here (yet): ask again after a while.
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0)));
    timer->async_wait([timer, reply = std::move(reply), r](const boost::system::error_code&) { reply(r); });
    return;
  }
  Stream& s = it->second;
  if (s.dropped || s.consumed >= need) {
    rpc::StreamCreditReply r;
    r.set_consumed(s.consumed);
    r.set_dropped(s.dropped);
    return reply(r);
  }
  auto w = std::make_shared<Waiter>();
  w->need = need;
  w->credit = std::move(reply);
  Park(s.producers, w, timeout_ms, [this, task_id, w] {
    auto it = streams_.find(task_id);
    if (it == streams_.end()) return;
    auto& list = it->second.producers;
    for (auto p = list.begin(); p != list.end(); ++p) {
      if (*p != w) continue;
      list.erase(p);
      rpc::StreamCreditReply r;
      r.set_consumed(it->second.consumed);
      w->credit(r);
      return;
    }
  });
}

void StreamTable::Park(std::vector<std::shared_ptr<Waiter>>& list, std::shared_ptr<Waiter> w, int64_t timeout_ms,
                       std::function<void()> on_timeout) {
  if (timeout_ms >= 0) {
    w->timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(timeout_ms));
    w->timer->async_wait([on_timeout = std::move(on_timeout)](const boost::system::error_code& ec) {
      if (!ec) on_timeout();
    });
  }
  list.push_back(std::move(w));
}

void StreamTable::WakeReaders(Stream& s, bool all) {
  if (s.readers.empty()) return;
  std::vector<std::shared_ptr<Waiter>> woken;
  bool ended = Ended(s) || s.dropped;
  for (auto p = s.readers.begin(); p != s.readers.end();) {
    if (all || ended || s.available > (*p)->need) {
      woken.push_back(std::move(*p));
      p = s.readers.erase(p);
    } else {
      ++p;
    }
  }
  rpc::StreamNextReply r;
  r.set_available(s.available);
  r.set_ended(ended);
  for (auto& w : woken) {
    if (w->timer) w->timer->cancel();
    w->next(r);
  }
}

void StreamTable::WakeProducers(Stream& s, bool all) {
  if (s.producers.empty()) return;
  std::vector<std::shared_ptr<Waiter>> woken;
  for (auto p = s.producers.begin(); p != s.producers.end();) {
    if (all || s.dropped || s.consumed >= (*p)->need) {
      woken.push_back(std::move(*p));
      p = s.producers.erase(p);
    } else {
      ++p;
    }
  }
  rpc::StreamCreditReply r;
  r.set_consumed(s.consumed);
  r.set_dropped(s.dropped);
  for (auto& w : woken) {
    if (w->timer) w->timer->cancel();
    w->credit(r);
  }
}

void StreamTable::MaybeErase(const std::string& task_id) {
  auto it = streams_.find(task_id);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  if (!s.returned) return;  // the producer may still hand in items
  // A dynamic stream's items are held by its return from now on.
  if (!s.dropped && !s.dynamic && !(Ended(s) && s.consumed >= s.available)) return;  // more to come or to read
  s.dropped = true;
  WakeReaders(s, true);
  WakeProducers(s, true);
  Release(s, kAll);
  Forget(task_id);
}

void StreamTable::Forget(const std::string& task_id) {
  auto it = streams_.find(task_id);
  if (it == streams_.end()) return;
  auto c = by_consumer_.find(it->second.consumer);
  if (c != by_consumer_.end()) {
    c->second.erase(task_id);
    if (c->second.empty()) by_consumer_.erase(c);
  }
  streams_.erase(it);
  if (closed_.insert(task_id).second) {
    closed_order_.push_back(task_id);
    if (closed_order_.size() > kClosedRemembered) {
      closed_.erase(closed_order_.front());
      closed_order_.pop_front();
    }
  }
}

size_t StreamTable::held() const {
  size_t n = 0;
  for (const auto& [tid, s] : streams_) n += s.held.size();
  return n;
}

}  // namespace phalanx::scheduler
