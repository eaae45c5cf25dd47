// The TaskManager's side of its workers' events (scheduler/task_manager.h):
// a worker registered, died (its tasks retried or failed), blocked in a get
// (its lease lent back), gave back tasks queued behind a blocked one, or
// unblocked. The same class as task_manager.cc, in a file of its own.

#include <algorithm>

#include "core/ids.h"
#include "core/logging.h"
#include "scheduler/task_manager.h"

namespace phalanx::scheduler {

void TaskManager::OnWorkerRegistered(Worker* w) {
  pool_->PushIdle(w);
  Dispatch();
}

void TaskManager::OnWorkerDied(Worker* w, const std::string& why) {
  if (w->blocked) --blocked_;
  std::deque<std::string> lost = std::move(w->inflight);
  w->inflight.clear();
  w->long_inflight = 0;
  if (w->has_lease) {
    ledger_->Release(w->leased, w->gpu_ids, /*lent=*/w->blocked);
    w->gpu_ids.clear();
    w->has_lease = false;
    leased_.erase(std::remove(leased_.begin(), leased_.end(), w), leased_.end());
  }
  w->blocked = false;
  for (const auto& [id, n] : w->pins) {
    for (int64_t i = 0; i < n; ++i) objects_->ReleasePin(id);
  }
  w->pins.clear();
  if (!w->actor_id.empty()) {
    for (const auto& tid : lost) {
      auto it = tasks_.find(tid);
      if (it == tasks_.end()) continue;
      it->second.pushed_pins.clear();
      --stats_.running;
      ++stats_.queued;
    }
    actors_->OnWorkerDied(w, lost, why);
    Dispatch();
    return;
  }
  std::vector<std::string> requeue;
  for (size_t i = 0; i < lost.size(); ++i) {
    auto it = tasks_.find(lost[i]);
    if (it == tasks_.end()) continue;
    Task& t = it->second;
    t.pushed_pins.clear();  // released with the worker's pins above
    t.pushed_long = false;
    --stats_.running;
    ++stats_.queued;
    if (t.cancelled) {  // the one running (force=True), or one queued behind it whose cancel was sent there
      FailTask(lost[i], StatusCode::kCancelled,
               "task " + t.spec.function_name() +
                   (i == 0 ? " was cancelled (its worker was stopped: force=True)" : " was cancelled before it ran"));
      continue;
    }
    if (i == 0) {  // the one it was running; the rest had not started
      if (t.spec.attempt() >= t.spec.max_retries()) {
        std::string msg = "task " + t.spec.function_name() + " failed: " + why + " while running it";
        if (t.spec.max_retries() > 0) msg += " (after " + std::to_string(t.spec.max_retries()) + " retries)";
        FailTask(lost[i], StatusCode::kWorkerDied, msg);
        continue;
      }
      t.spec.set_attempt(t.spec.attempt() + 1);
      ++stats_.retried;
      PHALANX_LOG(Warning) << "retrying " << t.spec.function_name() << " (attempt " << t.spec.attempt() + 1
                           << "): " << why;
    }
    requeue.push_back(lost[i]);
  }
  for (auto r = requeue.rbegin(); r != requeue.rend(); ++r) {
    ready_[KeyOf(tasks_[*r])].push_front(*r);
    ++num_ready_;
  }
  Dispatch();
}

void TaskManager::OnWorkerBlocked(Worker* w) {
  if (w->blocked || !w->has_lease) return;
  w->blocked = true;
  ++blocked_;
  ledger_->Lend(w->leased);
  if (w->inflight.size() > 1) {  // pipelined tasks queued behind the blocked one
    rpc::TaskIds recall;
    for (size_t i = 1; i < w->inflight.size(); ++i) recall.add_task_ids(w->inflight[i]);
    w->conn->Send(rpc::RECALL_TASKS, 0, 0, recall);
  }
  Dispatch();
}

void TaskManager::OnTasksRecalled(Worker* w, const rpc::TaskIds& ids) {
  std::vector<std::string> back;
  for (const auto& tid : ids.task_ids()) {
    auto pos = std::find(w->inflight.begin(), w->inflight.end(), tid);
    auto it = tasks_.find(tid);
    if (pos == w->inflight.end() || it == tasks_.end()) continue;
    w->inflight.erase(pos);
    Unpush(w, it->second);
    for (const auto& id : it->second.pushed_pins) {
      auto p = w->pins.find(id);
      if (p == w->pins.end()) continue;
      if (--p->second == 0) w->pins.erase(p);
      objects_->ReleasePin(id);
    }
    it->second.pushed_pins.clear();
    --stats_.running;
    ++stats_.queued;
    if (it->second.cancelled) {  // cancelled while it waited there: it comes back to be failed, not run
      FailTask(tid, StatusCode::kCancelled, "task " + it->second.spec.function_name() + " was cancelled before it ran");
      continue;
    }
    back.push_back(tid);
  }
  for (auto r = back.rbegin(); r != back.rend(); ++r) {
    ready_[KeyOf(tasks_[*r])].push_front(*r);
    ++num_ready_;
  }
  ReleaseLeaseIfIdle(w);
  Dispatch();
}

void TaskManager::OnWorkerUnblocked(Worker* w) {
  if (!w->blocked) return;
  w->blocked = false;
  --blocked_;
  if (w->has_lease) ledger_->Reclaim(w->leased);
}

}  // namespace phalanx::scheduler
