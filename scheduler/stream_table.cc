#include "scheduler/stream_table.h"

#include <algorithm>
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
  if (ReaderDue(s, consumed)) {
    reply(ReadState(s));
    MaybeErase(task_id);
    return;
  }
  auto w = std::make_shared<Waiter>();
  w->need = consumed;
  w->answer = [this, reply = std::move(reply)](const Stream& s) { reply(ReadState(s)); };
  Park(task_id, s, &Stream::readers, std::move(w), timeout_ms);
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
  if (ProducerDue(s, need)) return reply(CreditState(s));
  auto w = std::make_shared<Waiter>();
  w->need = need;
  w->answer = [this, reply = std::move(reply)](const Stream& s) { reply(CreditState(s)); };
  Park(task_id, s, &Stream::producers, std::move(w), timeout_ms);
}

void StreamTable::Park(const std::string& task_id, Stream& s, WaiterList Stream::*list, std::shared_ptr<Waiter> w,
                       int64_t timeout_ms) {
  if (timeout_ms >= 0) {
    w->timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(timeout_ms));
    std::weak_ptr<Waiter> weak = w;
    w->timer->async_wait([this, task_id, list, weak](const boost::system::error_code& ec) {
      auto w = weak.lock();
      auto it = streams_.find(task_id);
      if (ec || !w || it == streams_.end()) return;  // (answered already)
      auto& waiting = it->second.*list;
      auto pos = std::find(waiting.begin(), waiting.end(), w);
      if (pos == waiting.end()) return;
      waiting.erase(pos);
      w->answer(it->second);
    });
  }
  (s.*list).push_back(std::move(w));
}

rpc::StreamNextReply StreamTable::ReadState(const Stream& s) const {
  rpc::StreamNextReply r;
  r.set_available(s.available);
  r.set_ended(Ended(s) || s.dropped);
  return r;
}

rpc::StreamCreditReply StreamTable::CreditState(const Stream& s) const {
  rpc::StreamCreditReply r;
  r.set_consumed(s.consumed);
  r.set_dropped(s.dropped);
  return r;
}

void StreamTable::Wake(Stream& s, WaiterList Stream::*list, bool all) {
  WaiterList& waiting = s.*list;
  if (waiting.empty()) return;
  WaiterList woken;
  bool readers = list == &Stream::readers;
  for (auto p = waiting.begin(); p != waiting.end();) {
    if (all || (readers ? ReaderDue(s, (*p)->need) : ProducerDue(s, (*p)->need))) {
      woken.push_back(std::move(*p));
      p = waiting.erase(p);
    } else {
      ++p;
    }
  }
  for (auto& w : woken) {
    if (w->timer) w->timer->cancel();
    w->answer(s);
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
