#include "worker/held_calls.h"

#include <algorithm>
#include <unordered_set>

#include "core/process.h"

namespace phalanx {

void HeldCalls::set_unordered(bool unordered) {
  std::lock_guard<std::mutex> l(mu_);
  unordered_ = unordered;
}

size_t HeldCalls::num_held() {
  std::lock_guard<std::mutex> l(mu_);
  return num_held_;
}

bool HeldCalls::MustWait(uint64_t caller) {
  if (pending_total_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> l(mu_);
  return !unordered_ && pending_.count(caller) > 0;
}

std::vector<std::string> HeldCalls::RefArgs(const rpc::PushTask& task) {
  std::vector<std::string> ids;
  for (const auto& a : task.spec().args()) {
    if (!a.object_id().empty()) ids.push_back(a.object_id());
  }
  return ids;
}

void HeldCalls::Fill(Call* call, std::vector<rpc::ObjectValue> values) {
  call->task.clear_ref_args();
  for (auto& v : values) *call->task.add_ref_args() = std::move(v);
}

std::vector<rpc::ObjectValue> HeldCalls::LostValues(const std::vector<std::string>& ids, const Status& why) {
  std::vector<rpc::ObjectValue> lost(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    lost[i].set_object_id(ids[i]);
    lost[i].set_state(rpc::OBJ_LOST);
    lost[i].set_error_code(static_cast<int>(why.code()));
    lost[i].set_error("cannot fetch the argument: " + why.message());
  }
  return lost;
}

void HeldCalls::MarkCancelled(Call* call) {
  call->task.set_cancelled(true);
  Fill(call, LostValues(RefArgs(call->task),
                        Status(StatusCode::kCancelled, "the call was cancelled while it waited for it")));
}

Result<bool> HeldCalls::TryResolve(Call* call) {
  std::vector<std::string> ids = RefArgs(call->task);
  if (ids.empty()) return true;
  auto values = objects_->GetNow(ids);
  if (!values.ok()) {
    if (values.status().code() == StatusCode::kUnavailable) return values.status();
    Fill(call, LostValues(ids, values.status()));  // unreadable: the call runs and raises it
    return true;
  }
  bool pending = false;
  for (const auto& v : values.value()) pending = pending || v.state() == rpc::OBJ_PENDING;
  if (pending) {
    for (const auto& v : values.value()) {
      if (v.state() == rpc::OBJ_IN_STORE) objects_->Unpin(v.object_id());
    }
    return false;
  }
  Fill(call, std::move(values.value()));
  return true;
}

void HeldCalls::Hold(Call call) {
  auto h = std::make_shared<Held>();
  h->waiting = RefArgs(call.task);
  h->ready = h->waiting.empty();
  uint64_t caller = call.caller;
  h->call = std::move(call);
  std::lock_guard<std::mutex> l(mu_);
  ++pending_[caller];
  pending_total_.fetch_add(1, std::memory_order_release);
  ++num_held_;
  held_[caller].push_back(std::move(h));
  PromoteLocked();  // (the taker is the one holding it: it looks next)
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { Run(); });
  cv_.notify_one();
}

std::optional<HeldCalls::Call> HeldCalls::TakeReady() {
  if (pending_total_.load(std::memory_order_acquire) == 0) return std::nullopt;
  std::lock_guard<std::mutex> l(mu_);
  if (ready_.empty()) return std::nullopt;
  Call c = std::move(ready_.front());
  ready_.pop_front();
  pending_total_.fetch_sub(1, std::memory_order_release);
  auto p = pending_.find(c.caller);
  if (p != pending_.end() && --p->second == 0) pending_.erase(p);
  return c;
}

std::vector<HeldCalls::Call> HeldCalls::DropCaller(uint64_t caller) {
  std::vector<Call> dropped;
  std::lock_guard<std::mutex> l(mu_);
  auto it = held_.find(caller);
  if (it != held_.end()) {
    for (auto& h : it->second) {
      h->gone = true;
      dropped.push_back(std::move(h->call));
      --num_held_;
    }
    held_.erase(it);
  }
  for (auto r = ready_.begin(); r != ready_.end();) {
    if (r->caller != caller) {
      ++r;
      continue;
    }
    dropped.push_back(std::move(*r));
    r = ready_.erase(r);
  }
  pending_.erase(caller);
  pending_total_.fetch_sub(dropped.size(), std::memory_order_release);
  return dropped;
}

void HeldCalls::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::shared_ptr<HeldCalls::Held>> HeldCalls::CandidatesLocked() {
  std::vector<std::shared_ptr<Held>> out;
  for (auto& [caller, calls] : held_) {
    for (auto& h : calls) {
      if (!h->ready) out.push_back(h);
      if (!unordered_) break;  // (a caller's first call: the ones behind wait for it)
    }
  }
  return out;
}

bool HeldCalls::PromoteLocked() {
  bool moved = false;
  for (auto it = held_.begin(); it != held_.end();) {
    auto& calls = it->second;
    for (auto h = calls.begin(); h != calls.end();) {
      if (!(*h)->ready) {
        if (!unordered_) break;
        ++h;
        continue;
      }
      (*h)->gone = true;
      ready_.push_back(std::move((*h)->call));
      h = calls.erase(h);
      --num_held_;
      moved = true;
    }
    it = calls.empty() ? held_.erase(it) : std::next(it);
  }
  return moved;
}

void HeldCalls::Run() {
  NameThisThread("phalanx-held");
  while (true) {
    std::vector<std::shared_ptr<Held>> candidates;
    std::vector<std::string> task_ids;
    std::vector<std::string> ids;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] {
        if (stopping_) return true;
        candidates = CandidatesLocked();
        return !candidates.empty();
      });
      if (stopping_) return;
      std::unordered_set<std::string> seen;
      for (const auto& h : candidates) {
        task_ids.push_back(h->call.task.spec().task_id());
        for (const auto& id : h->waiting) {
          if (seen.insert(id).second) ids.push_back(id);
        }
      }
    }
    std::vector<bool> cancelled(candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) cancelled[i] = objects_->Cancelled(task_ids[i]);
    std::unordered_set<std::string> now_ready;
    if (!ids.empty()) {
      auto r = objects_->WaitAny(ids, kWaitSliceMs);
      if (!r.ok() && r.status().code() == StatusCode::kUnavailable) return;  // the raylet is gone: so is the taker
      if (r.ok()) now_ready.insert(r.value().begin(), r.value().end());
    }
    // Those whose arguments all came: read them (GetNow), outside mu_.
    std::vector<std::pair<std::shared_ptr<Held>, std::vector<std::string>>> to_read;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (size_t i = 0; i < candidates.size(); ++i) {
        Held& h = *candidates[i];
        if (h.gone) continue;
        if (cancelled[i]) {
          MarkCancelled(&h.call);
          h.ready = true;
          continue;
        }
        h.waiting.erase(std::remove_if(h.waiting.begin(), h.waiting.end(),
                                       [&](const std::string& id) { return now_ready.count(id) > 0; }),
                        h.waiting.end());
        if (h.waiting.empty()) to_read.emplace_back(candidates[i], RefArgs(h.call.task));
      }
    }
    bool pending_again = false;
    for (auto& [h, refs] : to_read) {
      auto values = objects_->GetNow(refs);
      if (!values.ok() && values.status().code() == StatusCode::kUnavailable) return;
      std::vector<rpc::ObjectValue> got = values.ok() ? std::move(values.value()) : LostValues(refs, values.status());
      bool pending = false;
      for (const auto& v : got) pending = pending || v.state() == rpc::OBJ_PENDING;
      bool gone;
      {
        std::lock_guard<std::mutex> l(mu_);
        gone = h->gone;  // (its caller went away)
        if (!gone && !pending) {
          Fill(&h->call, std::move(got));
          h->ready = true;
          continue;
        }
        for (const auto& v : got) {
          if (v.state() == rpc::OBJ_PENDING && !gone) h->waiting.push_back(v.object_id());
        }
      }
      pending_again = pending_again || pending;
      for (const auto& v : got) {
        if (v.state() == rpc::OBJ_IN_STORE) objects_->Unpin(v.object_id());
      }
    }
    bool wake;
    {
      std::lock_guard<std::mutex> l(mu_);
      wake = PromoteLocked();
    }
    if (wake) objects_->Wake();
    if (pending_again) {  // ready by the wait, not yet by the get: not again at once
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(kWaitSliceMs), [&] { return stopping_; });
    }
  }
}

}  // namespace phalanx
