#include "worker/ref_counter.h"

#include <algorithm>
#include <thread>

#include "core/frame.h"
#include "core/value_format.h"

namespace phalanx {

namespace {
constexpr size_t kFlushBatch = 4096;                          // flush at once past this many changes
constexpr auto kWaitSlice = std::chrono::milliseconds(100);   // interrupt checks this often
}  // namespace

RefCounter::Flush RefCounter::Add(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  if (local_refs_[id]++ != 0) return Flush::kNone;
  bool first = dirty_.empty();
  dirty_.emplace(id, false);  // keeps the first recorded state if already dirty
  return first ? Flush::kSoon : Flush::kNone;
}

void RefCounter::Adopt(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  ++local_refs_[id];
}

RefCounter::Flush RefCounter::Remove(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = local_refs_.find(id);
  if (it == local_refs_.end() || --it->second > 0) return Flush::kNone;
  local_refs_.erase(it);
  local_values_.erase(id);
  if (!failed_direct_.empty()) failed_direct_.erase(id);
  direct_pending_.erase(id);
  auto mo = mapped_.find(id);
  if (mo != mapped_.end() && mo->second.views == 0) {
    mapped_.erase(mo);
    releases_.push_back(id);
  }
  if (stopping_) return Flush::kNone;
  bool first = dirty_.empty();
  dirty_.emplace(id, true);
  if (dirty_.size() >= kFlushBatch) return Flush::kNow;
  return first ? Flush::kSoon : Flush::kNone;
}

int64_t RefCounter::Count(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = local_refs_.find(id);
  return it == local_refs_.end() ? 0 : it->second;
}

RefCounter::Flush RefCounter::Release(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) return Flush::kNone;
  auto mo = mapped_.find(id);
  if (mo != mapped_.end()) {
    if (--mo->second.views > 0 || local_refs_.count(id)) return Flush::kNone;  // the mapping stays for later gets
    mapped_.erase(mo);
  }
  releases_.push_back(id);
  return Flush::kSoon;
}

void RefCounter::CacheValue(const std::string& id, const std::string& data) {
  std::lock_guard<std::mutex> l(mu_);
  local_values_[id] = data;  // dropped when the adopted ref goes
}

void RefCounter::AnswerLocally(const std::vector<std::string>& ids, std::vector<rpc::ObjectValue>* out,
                               rpc::GetObjects* ask, std::vector<size_t>* asked) {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = local_values_.find(ids[i]);
    auto mo = mapped_.find(ids[i]);
    rpc::ObjectValue& v = (*out)[i];
    if (it != local_values_.end()) {
      v.set_object_id(ids[i]);
      v.set_state(rpc::OBJ_INLINE);
      v.set_data(it->second);
    } else if (mo != mapped_.end()) {
      v.set_object_id(ids[i]);
      v.set_state(rpc::OBJ_IN_STORE);
      v.set_offset(mo->second.offset);
      v.set_size(mo->second.size);
      ++mo->second.views;
    } else {
      ask->add_object_ids(ids[i]);
      asked->push_back(i);
    }
  }
}

void RefCounter::TakeAnswers(rpc::GetObjectsReply* reply, const std::vector<size_t>& asked,
                             std::vector<rpc::ObjectValue>* out) {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t k = 0; k < asked.size(); ++k) {
    rpc::ObjectValue& v = *reply->mutable_objects(static_cast<int>(k));
    bool held = local_refs_.count(v.object_id()) > 0;
    if (v.state() == rpc::OBJ_INLINE && held) local_values_[v.object_id()] = v.data();
    if (v.state() == rpc::OBJ_IN_STORE && held) {
      auto [mo, fresh] = mapped_.try_emplace(v.object_id(), MappedObject{v.offset(), v.size(), 0});
      if (!fresh) releases_.push_back(v.object_id());  // already mapped: this pin is extra
      ++mo->second.views;
    }
    (*out)[asked[k]] = std::move(v);
  }
}

std::vector<std::string> RefCounter::ReadyHere(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> ready;
  for (const auto& id : ids) {
    if (local_values_.count(id) || mapped_.count(id)) ready.push_back(id);
  }
  return ready;
}

void RefCounter::ExpectDirect(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> l(mu_);
  direct_pending_.insert(ids.begin(), ids.end());
}

bool RefCounter::DirectResultsCame(std::vector<rpc::TaskDone>* done, uint64_t inline_limit) {
  bool awaited = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& d : *done) {
      for (auto& r : *d.mutable_returns()) {
        // Cached even when the ref is not adopted yet (the result can beat the
        // submitter's bookkeeping), not when its last ref is gone already.
        if (!r.in_store() && r.data().size() <= inline_limit && direct_pending_.count(r.object_id())) {
          if (value_format::IsError(r.data())) failed_direct_.insert(r.object_id());
          local_values_[r.object_id()] = std::move(*r.mutable_data());
        }
        direct_pending_.erase(r.object_id());
        awaited = (!raylet_awaits_.empty() && raylet_awaits_.erase(r.object_id()) > 0) || awaited;
      }
    }
    direct_changes_.fetch_add(1, std::memory_order_release);
  }
  direct_cv_.notify_all();
  return awaited;
}

void RefCounter::ForgetDirect(const std::vector<std::string>& ids) {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& id : ids) {
      direct_pending_.erase(id);
      raylet_awaits_.erase(id);
    }
    direct_changes_.fetch_add(1, std::memory_order_release);
  }
  direct_cv_.notify_all();
}

void RefCounter::RayletAwaits(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& id : ids) {
    if (direct_pending_.count(id)) raylet_awaits_.insert(id);
  }
}

bool RefCounter::DirectPendingLocked(const std::vector<std::string>& ids, bool until_failure) const {
  if (direct_pending_.empty()) return false;
  bool pending = false;
  for (const auto& id : ids) {
    if (direct_pending_.count(id)) {
      pending = true;
      break;
    }
  }
  if (!pending || !until_failure || failed_direct_.empty()) return pending;
  for (const auto& id : ids) {
    if (failed_direct_.count(id)) return false;  // (one failed: the get ends)
  }
  return true;
}

Status RefCounter::AwaitDirect(const std::vector<std::string>& ids, Deadline deadline,
                               const InterruptCheck& interrupt, bool until_failure, DirectWaitObserver* observer) {
  std::unique_lock<std::mutex> l(mu_);
  auto pending = [&] { return DirectPendingLocked(ids, until_failure); };
  if (!pending()) return Status::OK();
  // A result usually comes within ~150 us: look for it before sleeping,
  // without the lock (which the thread that reads results must not wait for).
  int spin = result_spin_.Budget();
  auto start = Clock::now();
  auto spin_until = start + std::chrono::microseconds(spin);
  while (pending() && Clock::now() < spin_until) {
    uint64_t seen = direct_changes_.load(std::memory_order_acquire);
    l.unlock();
    while (direct_changes_.load(std::memory_order_acquire) == seen && Clock::now() < spin_until) {
      std::this_thread::yield();
    }
    l.lock();
  }
  bool slept = false;
  Status st;
  while (pending() && !stopping_ && Clock::now() < deadline) {
    if (observer != nullptr && !slept) {
      slept = true;
      l.unlock();
      observer->Sleeping();
      l.lock();
      continue;  // (look again: it may have come meanwhile)
    }
    direct_cv_.wait_until(l, std::min(deadline, Clock::now() + kWaitSlice));
    if (interrupt && pending()) {
      l.unlock();
      st = interrupt();
      l.lock();
      if (!st.ok()) break;
    }
  }
  result_spin_.Done(Clock::now() - start);
  if (slept) {
    l.unlock();
    observer->Awake();
  }
  return st;
}

void RefCounter::DrainInto(std::string* out) {
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) return;
  if (unmap_idle_.exchange(false)) {
    for (auto mo = mapped_.begin(); mo != mapped_.end();) {
      if (mo->second.views > 0) {
        ++mo;
        continue;
      }
      releases_.push_back(mo->first);
      mo = mapped_.erase(mo);
    }
  }
  if (!dirty_.empty()) {
    rpc::UpdateRefs m;
    for (const auto& [id, was_held] : dirty_) {
      bool held = local_refs_.count(id) > 0;
      if (held && !was_held) m.add_add(id);
      if (!held && was_held) m.add_remove(id);
    }
    dirty_.clear();
    if (m.add_size() + m.remove_size() > 0) *out += EncodeFrame(rpc::UPDATE_REFS, 0, 0, m);
  }
  if (!releases_.empty()) {
    rpc::ObjectIds m;
    for (auto& id : releases_) m.add_object_ids(std::move(id));
    releases_.clear();
    *out += EncodeFrame(rpc::RELEASE_OBJECTS, 0, 0, m);
  }
}

void RefCounter::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  direct_cv_.notify_all();
}

}  // namespace phalanx
