#include "objectstore/object_table.h"

#include "core/ids.h"
#include "core/logging.h"
#include "core/value_format.h"

#include <cstring>

namespace phalanx::objectstore {

namespace {
constexpr size_t kFreedMemory = 16384;  // how many freed ids we remember (bounded memory)
}

void ObjectTable::AddRef(const std::string& id) { ++entries_[id].refs; }

void ObjectTable::RemoveRef(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (--it->second.refs <= 0) MaybeFree(id);
}

void ObjectTable::MaybeFree(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.refs > 0) return;
  Entry& e = it->second;
  // A pending object nobody holds is freed once its value arrives (or now, if
  // no one waits for it); a store object being written is freed at seal.
  if (e.creating || e.restoring || !e.resident_waiters.empty()) return;
  if (e.state == State::kPending && (!e.waiters.empty() || !e.locators.empty())) return;
  bool in_store = e.state == State::kInStore || e.state == State::kSpilled;
  if (e.state == State::kInStore) store_->Delete(id);
  if (e.state == State::kSpilled) {
    files_->Remove(id);
    --num_spilled_;
  }
  std::string remote = e.state == State::kPending ? e.remote_node : std::string();
  uint32_t holds = e.remote_holds;
  if (e.state == State::kInline) {
    --num_inline_;
    inline_bytes_ -= e.data.size();
  }
  bool had_value = e.state != State::kPending;
  std::vector<std::string> contained = std::move(e.contained);
  entries_.erase(it);
  if (owner_) owner_->Gone(id);
  if (had_value || !remote.empty()) RememberFreed(id);
  if (had_value && owner_) owner_->Freed(id, in_store);
  if (!remote.empty() && owner_) owner_->Drop(id, remote, holds);
  for (const auto& c : contained) RemoveRef(c);
}

void ObjectTable::RememberFreed(const std::string& id) {
  if (freed_set_.insert(id).second) freed_order_.push_back(id);
  while (freed_order_.size() > kFreedMemory) {
    freed_set_.erase(freed_order_.front());
    freed_order_.pop_front();
  }
}

void ObjectTable::BecomeReady(const std::string& id, Entry& e) {
  if (!e.remote_node.empty()) {  // here now (or lost): the node holding it for us may let go
    std::string node = std::move(e.remote_node);
    e.remote_node.clear();
    uint32_t holds = e.remote_holds;
    e.remote_holds = 0;
    if (owner_) owner_->Drop(id, node, holds);
    if (owner_ && e.state != State::kLost) owner_->CopiedHere(id);
  }
  auto waiters = std::move(e.waiters);
  e.waiters.clear();
  auto locators = std::move(e.locators);
  e.locators.clear();
  for (auto& w : waiters) w();
  for (auto& w : locators) w();
}

bool ObjectTable::SetRemote(const std::string& id, const std::string& node, uint64_t size) {
  Entry& e = entries_[id];
  if (e.state == State::kPending && !e.creating && e.remote_node == node) {
    ++e.remote_holds;
    if (e.remote_size == 0) e.remote_size = size;
    return true;
  }
  if (e.state != State::kPending || e.creating || !e.remote_node.empty()) {
    MaybeFree(id);  // (an entry made just now)
    return false;
  }
  e.remote_node = node;
  e.remote_holds = 1;
  e.remote_size = size;
  auto locators = std::move(e.locators);
  e.locators.clear();
  if (!e.waiters.empty()) Demand(id, e);
  for (auto& w : locators) w();  // (may free the entry)
  MaybeFree(id);
  return true;
}

std::vector<std::string> ObjectTable::AddBorrowed(const std::vector<std::string>& ids, const std::string& node) {
  std::vector<std::string> release;
  for (const auto& id : ids) {
    auto it = entries_.find(id);
    // Known here only as something waited for (no holder, no value, no
    // source): the lender's copy is the one to read.
    bool unknown = it == entries_.end() ||
                   (it->second.state == State::kPending && !it->second.creating && it->second.refs <= 0 &&
                    it->second.remote_node.empty());
    Entry& e = entries_[id];
    ++e.refs;
    if (!unknown && !(e.state == State::kPending && e.remote_node == node)) {
      release.push_back(id);
      continue;
    }
    SetRemote(id, node, 0);
  }
  return release;
}

void ObjectTable::Demand(const std::string& id, Entry& e) {
  if (e.demanded || e.remote_node.empty()) return;
  e.demanded = true;
  if (owner_) owner_->Demand(id, e.remote_node);
}

void ObjectTable::OnLocated(const std::string& id, ReadyCallback cb) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (WasFreed(id)) return cb();
    it = entries_.emplace(id, Entry{}).first;
  }
  if (it->second.state != State::kPending || !it->second.remote_node.empty()) return cb();
  it->second.locators.push_back(std::move(cb));
}

std::string ObjectTable::RemoteNode(const std::string& id) const {
  auto it = entries_.find(id);
  return it == entries_.end() || it->second.state != State::kPending ? std::string() : it->second.remote_node;
}

std::pair<std::string, uint32_t> ObjectTable::TakeRemoteHolds(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != State::kPending || it->second.remote_holds == 0) return {};
  uint32_t holds = it->second.remote_holds;
  it->second.remote_holds = 0;
  return {it->second.remote_node, holds};
}

uint64_t ObjectTable::RemoteSize(const std::string& id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.remote_size;
}

void ObjectTable::PutInline(const std::string& id, std::string data, std::vector<std::string> contained) {
  Entry& e = entries_[id];
  if (e.state != State::kPending || e.creating) return;
  for (const auto& c : contained) AddRef(c);
  e.state = State::kInline;
  inline_bytes_ += data.size();
  ++num_inline_;
  e.data = std::move(data);
  e.contained = std::move(contained);
  BecomeReady(id, e);
  MaybeFree(id);
}

Result<uint64_t> ObjectTable::CreateInStore(const std::string& id, uint64_t size, std::vector<std::string> contained) {
  Entry& e = entries_[id];
  // A copy freed here but still mapped by a reader is this very value (ids
  // name immutable values): it comes back instead of a second copy.
  if (e.state != State::kPending || e.creating || ReviveFromStore(id)) {
    return Status::AlreadyExists("object " + ToHex(id) + " already has a value");
  }
  auto off = CreateSpace(id, size);
  if (!off.ok()) {
    if (e.refs <= 0 && e.waiters.empty()) entries_.erase(id);
    return off.status();
  }
  for (const auto& c : contained) AddRef(c);
  e.creating = true;
  e.size = size;
  e.contained = std::move(contained);
  return off.value();
}

Status ObjectTable::SealInStore(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.creating) return Status::NotFound("seal of unknown object " + ToHex(id));
  PHALANX_RETURN_IF_ERROR(store_->Seal(id));
  Entry& e = it->second;
  e.creating = false;
  e.state = State::kInStore;
  BecomeReady(id, e);
  MaybeFree(id);
  return Status::OK();
}

Status ObjectTable::PutInStore(const std::string& id, const std::string& data, std::vector<std::string> contained) {
  auto off = CreateInStore(id, data.size(), std::move(contained));
  if (!off.ok()) return off.status();
  std::memcpy(store_->base() + off.value(), data.data(), data.size());
  return SealInStore(id);
}

bool ObjectTable::ReviveFromStore(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.state != State::kPending || it->second.creating) return false;
  if (!store_->Revive(id)) return false;
  Entry& e = it->second;
  e.state = State::kInStore;
  e.size = store_->Find(id)->size;
  BecomeReady(id, e);
  MaybeFree(id);
  return true;
}

void ObjectTable::AbortCreate(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.creating) return;
  store_->Abort(id);
  it->second.creating = false;
  std::vector<std::string> contained = std::move(it->second.contained);
  it->second.contained.clear();
  for (const auto& c : contained) RemoveRef(c);
  MaybeFree(id);
}

void ObjectTable::MarkLost(const std::string& id, StatusCode code, const std::string& why) {
  Entry& e = entries_[id];
  if (e.state != State::kPending || e.creating) return;
  e.state = State::kLost;
  e.lost_code = code;
  e.data = why;
  BecomeReady(id, e);
  MaybeFree(id);
}

void ObjectTable::LoseCopies(const std::string& id, const std::string& why) {
  auto it = entries_.find(id);
  // (Rebuild may add entries, which may rehash the map: the entry's address
  // stays good, the iterator does not.)
  Entry* e = it == entries_.end() ? nullptr : &it->second;
  std::string reason;
  if (e != nullptr && e->state == State::kPending && !e->creating && owner_ && owner_->Rebuild(id, why, &reason)) {
    // The node it was remote at keeps nothing for us now (if it is still
    // alive: a lender that had no copy left either).
    if (!e->remote_node.empty() && e->remote_holds > 0) owner_->Drop(id, e->remote_node, e->remote_holds);
    e->remote_node.clear();
    e->remote_holds = 0;
    e->remote_size = 0;
    e->demanded = false;
    return;
  }
  MarkLost(id, StatusCode::kObjectLost, reason.empty() ? why : why + "; it cannot be made again: " + reason);
}

void ObjectTable::OnReady(const std::string& id, ReadyCallback cb) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (WasFreed(id)) return cb();
    it = entries_.emplace(id, Entry{}).first;
  }
  if (it->second.state != State::kPending) return cb();
  it->second.waiters.push_back(std::move(cb));
  Demand(id, it->second);
}

bool ObjectTable::IsReady(const std::string& id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return WasFreed(id);
  return it->second.state != State::kPending;
}

bool ObjectTable::IsFailed(const std::string& id) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return WasFreed(id);
  const Entry& e = it->second;
  return e.state == State::kLost || (e.state == State::kInline && value_format::IsError(e.data));
}

void ObjectTable::Describe(const std::string& id, rpc::ObjectValue* out, bool pin) {
  out->set_object_id(id);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (WasFreed(id)) {
      out->set_state(rpc::OBJ_LOST);
      out->set_error_code(static_cast<int>(StatusCode::kObjectLost));
      out->set_error("object " + ToHex(id) + " was freed: no reference to it remained");
    } else {
      out->set_state(rpc::OBJ_PENDING);
    }
    return;
  }
  Entry& e = it->second;
  if (e.state == State::kSpilled && !pin) {
    out->set_state(rpc::OBJ_IN_STORE);
    out->set_size(e.size);
    return;
  }
  if (e.state == State::kSpilled) {
    Status st = RestoreNow(id, e);
    if (!st.ok()) {
      out->set_state(rpc::OBJ_LOST);
      out->set_error_code(static_cast<int>(st.code()));
      out->set_error("object " + ToHex(id) + " is spilled to disk and cannot be read back now: " + st.message());
      return;
    }
  }
  switch (e.state) {
    case State::kPending: out->set_state(rpc::OBJ_PENDING); break;
    case State::kInline:
      out->set_state(rpc::OBJ_INLINE);
      out->set_data(e.data);
      for (const auto& c : e.contained) out->add_contained_ids(c);
      break;
    case State::kSpilled:  // (read back above)
    case State::kLost:
      out->set_state(rpc::OBJ_LOST);
      out->set_error_code(static_cast<int>(e.lost_code));
      out->set_error(e.data);
      break;
    case State::kInStore: {
      const StoreEntry* se = store_->Find(id);
      if (se == nullptr || (pin && !store_->Pin(id).ok())) {
        out->set_state(rpc::OBJ_LOST);
        out->set_error_code(static_cast<int>(StatusCode::kObjectLost));
        out->set_error("object " + ToHex(id) + " is no longer in the store");
        return;
      }
      out->set_state(rpc::OBJ_IN_STORE);
      out->set_offset(se->offset);
      out->set_size(se->size);
      break;
    }
  }
}

}  // namespace phalanx::objectstore
