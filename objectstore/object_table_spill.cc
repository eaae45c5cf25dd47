// ObjectTable's spilling: store space made by writing sealed, unmapped
// objects to disk (least recently used first), and their way back into
// memory (docs/fault-tolerance.md, "Spilling").
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/ids.h"
#include "core/logging.h"
#include "objectstore/object_table.h"

namespace phalanx::objectstore {

namespace {
constexpr std::chrono::milliseconds kRestoreRetry{50};  // a restore that found no room tries again
}

bool ObjectTable::IsResident(const std::string& id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return WasFreed(id);
  return it->second.state != State::kPending && it->second.state != State::kSpilled;
}

bool ObjectTable::IsSpilled(const std::string& id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.state == State::kSpilled;
}

void ObjectTable::OnResident(const std::string& id, ReadyCallback cb) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != State::kSpilled) return OnReady(id, std::move(cb));
  it->second.resident_waiters.push_back(std::move(cb));
  StartRestore(id, it->second);
}

bool ObjectTable::RetrySoon(std::function<void()> fn) {
  if (files_ == nullptr || io_ == nullptr) return false;
  auto timer = std::make_shared<boost::asio::steady_timer>(*io_, kRestoreRetry);
  std::weak_ptr<char> alive = alive_;
  timer->async_wait([alive, timer, fn = std::move(fn)](const boost::system::error_code& ec) {
    if (!ec && !alive.expired()) fn();
  });
  return true;
}

Result<uint64_t> ObjectTable::CreateSpace(const std::string& id, uint64_t size, uint64_t credit) {
  auto off = store_->Create(id, size);
  if (off.ok() || files_ == nullptr || off.status().code() != StatusCode::kOutOfMemory ||
      size > store_->Stats().capacity) {
    return off;
  }
  Status room = MakeRoom(size, credit);
  if (room.ok()) {
    off = store_->Create(id, size);
    if (off.ok()) return off;
  }
  return Status::OutOfMemory(off.status().message() + " Spilling to disk could not make room: " +
                             (room.ok() ? "the free space is in pieces too small" : room.message()) + ".");
}

Status ObjectTable::MakeRoom(uint64_t size, uint64_t credit) {
  disk_full_ = false;
  std::unordered_set<std::string> skip;  // not spillable after all
  while (!store_->Fits(size)) {
    auto ids = store_->SpillCandidates(size, skip);
    if (ids.empty()) {
      if (owner_) owner_->StoreFull();
      return Status::OutOfMemory("every object left in memory is mapped by a process, being sent or being written (" +
                                 files_->Describe() + ")");
    }
    for (const auto& id : ids) {
      if (store_->Fits(size)) break;
      Status st = SpillOne(id, &credit);
      if (st.code() == StatusCode::kOutOfMemory) {  // the disk's limit
        disk_full_ = true;
        return st;
      }
      if (!st.ok()) {
        if (st.code() != StatusCode::kNotFound) {
          PHALANX_LOG(Warning) << "cannot spill " << ToHex(id) << ": " << st.ToString();
        }
        skip.insert(id);
      }
    }
  }
  return Status::OK();
}

Status ObjectTable::SpillOne(const std::string& id, uint64_t* credit) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != State::kInStore || it->second.creating) {
    return Status::NotFound("not a store value of the table");
  }
  const StoreEntry* se = store_->Find(id);
  if (se == nullptr || !se->sealed || se->pins > 0) return Status::NotFound("not spillable");
  PHALANX_RETURN_IF_ERROR(files_->Spill(id, store_->base() + se->offset, se->size, *credit));
  *credit -= std::min(*credit, se->size);
  Entry& e = it->second;
  e.size = se->size;
  store_->Delete(id);  // unmapped: its space is free now
  e.state = State::kSpilled;
  ++num_spilled_;
  return Status::OK();
}

void ObjectTable::StartRestore(const std::string& id, Entry& e) {
  if (e.restoring) return;
  auto off = CreateSpace(id, e.size, e.size);
  if (!off.ok() && disk_full_) {
    // The disk is full too: that will not pass by waiting. The waiters find out (their Describe says why).
    PHALANX_LOG(Warning) << "object " << ToHex(id) << " cannot come back from disk: " << off.status().message();
    return RunResidentWaiters(id, e);
  }
  if (!off.ok()) {
    if (!e.restore_waits) {
      e.restore_waits = true;
      PHALANX_LOG(Info) << "object " << ToHex(id) << " waits for room to come back from disk: " << off.status().message();
    }
    (void)RetrySoon([this, id] {
      auto it = entries_.find(id);
      if (it == entries_.end() || it->second.state != State::kSpilled) return;
      if (!it->second.resident_waiters.empty()) return StartRestore(id, it->second);
      MaybeFree(id);
    });
    return;
  }
  e.restoring = true;
  files_->Restore(id, store_->base() + off.value(), store_->Lease(id),
                  [this, id](Status st) { FinishRestore(id, st); });
}

void ObjectTable::FinishRestore(const std::string& id, const Status& st) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.restoring) return;  // (RestoreNow finished it)
  Entry& e = it->second;
  e.restoring = false;
  if (st.ok() && store_->Seal(id).ok()) return Restored(id, e, /*post=*/false);
  store_->Abort(id);
  files_->Remove(id);
  --num_spilled_;
  e.state = State::kLost;
  e.lost_code = StatusCode::kObjectLost;
  e.data = "object " + ToHex(id) + " was spilled to disk and cannot be read back: " + st.message();
  PHALANX_LOG(Warning) << e.data;
  RunResidentWaiters(id, e);
}

void ObjectTable::RunResidentWaiters(const std::string& id, Entry& e) {
  auto waiters = std::move(e.resident_waiters);
  e.resident_waiters.clear();
  for (auto& w : waiters) w();
  MaybeFree(id);
}

Status ObjectTable::RestoreNow(const std::string& id, Entry& e) {
  if (e.restoring) {  // being read on the I/O thread into space made already: read it here too
    const StoreEntry* se = store_->Find(id);
    if (se == nullptr) return Status::Internal("the space of a restore in progress is gone");
    PHALANX_RETURN_IF_ERROR(files_->RestoreNow(id, store_->base() + se->offset));
    e.restoring = false;  // (the I/O thread's end finds nothing to do)
  } else {
    PHALANX_ASSIGN_OR_RETURN(uint64_t off, CreateSpace(id, e.size, e.size));
    Status st = files_->RestoreNow(id, store_->base() + off);
    if (!st.ok()) {
      store_->Abort(id);
      return st;
    }
  }
  PHALANX_RETURN_IF_ERROR(store_->Seal(id));
  Restored(id, e, /*post=*/true);
  return Status::OK();
}

void ObjectTable::Restored(const std::string& id, Entry& e, bool post) {
  files_->Remove(id);
  --num_spilled_;
  e.state = State::kInStore;
  if (!post) return RunResidentWaiters(id, e);
  // (inside a Describe: its caller goes on with the entry; the waiters run later)
  auto waiters = std::move(e.resident_waiters);
  e.resident_waiters.clear();
  std::weak_ptr<char> alive = alive_;
  boost::asio::post(*io_, [this, alive, id, waiters = std::move(waiters)] {
    if (alive.expired()) return;
    for (auto& w : waiters) w();
    MaybeFree(id);
  });
}

}  // namespace phalanx::objectstore
