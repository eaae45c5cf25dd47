#include "objectstore/object_manager.h"

#include <algorithm>

#include <boost/asio/post.hpp>

#include "core/ids.h"

namespace phalanx::objectstore {

ObjectManager::ObjectManager(boost::asio::io_context& io, std::string self, std::unique_ptr<ObjectStore> store,
                             std::unique_ptr<Transport> transport, PeerChannel* peers, ObjectEvents* events,
                             TransferOptions options, ObjectDirectory* directory)
    : io_(io),
      self_(std::move(self)),
      peers_(peers),
      events_(events),
      directory_(directory),
      store_(std::move(store)),
      owner_(this),
      table_(store_.get(), &owner_),
      transfer_(&table_, store_.get(), std::move(transport), options, directory, self_, &owner_) {}

void ObjectManager::TableOwner::Demand(const std::string& id, const std::string& node) {
  m_->Fetch({id}, node);  // (once here, Drop lets the node go)
}

void ObjectManager::TableOwner::Drop(const std::string& id, const std::string& node, uint32_t holds) {
  m_->Release(node, {id}, {holds});
}

void ObjectManager::TableOwner::Freed(const std::string& id, bool was_in_store) {
  // Only this node leaves the directory: the entry goes with its last
  // location, whether the copies or the maker go first.
  bool copy = m_->transfer_.IsCopy(id);
  if ((was_in_store || copy) && m_->directory_ != nullptr) m_->directory_->Unlisted(id);
  if (copy) m_->transfer_.Forget(id);
  if (m_->events_) m_->events_->OnObjectFreed(id, was_in_store, copy);
}

void ObjectManager::Fetch(const std::vector<std::string>& ids, const std::string& node) {
  for (const auto& id : ids) transfer_.Pull(id, node);
}

void ObjectManager::Adopt(const std::string& node, const std::string& holder, const std::vector<std::string>& ids) {
  rpc::ReleaseHeld m;
  m.set_holder(holder);
  m.set_adopt(true);
  m.set_from_node(self_);
  for (const auto& i : ids) m.add_object_ids(i);
  peers_->Call(node, rpc::RELEASE_HELD, m, kReleaseTimeoutMs, nullptr);
}

void ObjectManager::Release(const std::string& node, const std::vector<std::string>& ids,
                            const std::vector<uint32_t>& counts) {
  if (ids.empty() || node == self_) return;
  auto& pending = releasing_[node];
  for (size_t i = 0; i < ids.size(); ++i) pending[ids[i]] += i < counts.size() ? counts[i] : 1;
  if (release_posted_) return;
  release_posted_ = true;
  boost::asio::post(io_, [this] { FlushReleases(); });
}

void ObjectManager::FlushReleases() {
  release_posted_ = false;
  auto all = std::move(releasing_);
  releasing_.clear();
  for (auto& [node, ids] : all) {
    rpc::ReleaseHeld m;
    m.set_from_node(self_);
    for (const auto& [id, n] : ids) {
      m.add_object_ids(id);
      m.add_counts(n);
    }
    peers_->Call(node, rpc::RELEASE_HELD, m, kReleaseTimeoutMs, nullptr);
  }
}

void ObjectManager::HoldFor(const std::string& node, const std::string& id) {
  if (held_for_[node][id]++ == 0) table_.AddRef(id);
}

void ObjectManager::Unhold(const std::string& node, const std::string& id, uint32_t count) {
  auto held = held_for_.find(node);
  if (held == held_for_.end()) return;
  auto it = held->second.find(id);
  if (it == held->second.end()) return;
  if (it->second > count) {
    it->second -= count;
    return;
  }
  held->second.erase(it);
  if (held->second.empty()) held_for_.erase(held);
  table_.RemoveRef(id);
}

void ObjectManager::Borrow(const std::vector<std::string>& ids, const std::string& node) {
  Release(node, table_.AddBorrowed(ids, node));
}

void ObjectManager::ListInDirectory(const std::string& id, uint64_t size) {
  if (directory_ != nullptr) directory_->Located(id, size, size, /*complete=*/true);
}

size_t ObjectManager::ListAllInDirectory() {
  size_t n = 0;
  store_->ForEachSealed([&](const std::string& id, uint64_t size) {
    ListInDirectory(id, size);
    ++n;
  });
  table_.ForEachSpilled([&](const std::string& id, uint64_t size) {  // (served from disk: still this node's)
    ListInDirectory(id, size);
    ++n;
  });
  return n;
}

void ObjectManager::EnableSpilling(SpillOptions options) {
  spill_ = std::make_unique<SpillFiles>(io_, std::move(options));
  table_.EnableSpilling(spill_.get(), &io_);
}

Status ObjectManager::AddDeviceObject(const std::string& id, Device* device, uint64_t addr, uint64_t size,
                                      StagingOptions staging) {
  if (device_objects_.count(id)) return Status::AlreadyExists("device object " + ToHex(id) + " is listed already");
  staging.slot_bytes = std::max<size_t>(staging.slot_bytes, transfer_.options().chunk_bytes);
  PHALANX_ASSIGN_OR_RETURN(auto source, StagedSource::Make(io_, device, addr, size, staging));
  std::weak_ptr<StagedSource> weak = source;
  transfer_.ServeFrom(id, size, [weak](uint64_t offset, uint64_t length, ObjectTransfer::RangeDone done) {
    auto s = weak.lock();
    if (!s) return done(Status(StatusCode::kObjectLost, "the device object was dropped"), nullptr, 0, nullptr);
    s->Read(offset, length, std::move(done));
  });
  device_objects_[id] = std::move(source);
  if (directory_ != nullptr) directory_->DeviceLocated(id, size, device->name());
  return Status::OK();
}

void ObjectManager::RemoveDeviceObject(const std::string& id) {
  if (!device_objects_.erase(id)) return;
  transfer_.Unserve(id);
  if (directory_ != nullptr) directory_->Unlisted(id);
}

void ObjectManager::FetchToDevice(const std::string& id, const std::string& node, Device* device, uint64_t addr,
                                  uint64_t capacity, std::function<void(Result<uint64_t>)> done,
                                  StagingOptions staging) {
  staging.slot_bytes = std::max<size_t>(staging.slot_bytes, transfer_.options().chunk_bytes);
  std::string key = "device-copy:" + std::to_string(++device_copies_) + ":" + id;
  auto sink = std::make_shared<std::shared_ptr<StagedSink>>();
  auto finished = std::make_shared<bool>(false);
  boost::asio::io_context* io = &io_;
  transfer_.PullChunks(
      key, id, node,
      [io, sink, device, addr, capacity, staging](uint64_t size) -> Result<ObjectTransfer::ChunkWriter> {
        if (size > capacity) {
          return Status::InvalidArgument("the object is " + std::to_string(size) + " bytes; the buffer on " +
                                         device->name() + " has room for " + std::to_string(capacity));
        }
        PHALANX_ASSIGN_OR_RETURN(*sink, StagedSink::Make(*io, device, addr, size, staging));
        std::shared_ptr<StagedSink> s = *sink;
        return ObjectTransfer::ChunkWriter(
            [s](uint64_t offset, const char* data, size_t len) { return s->Write(offset, data, len); });
      },
      [sink, finished, done](uint64_t size, uint64_t bytes, const Status& st) {
        if (*finished) return;
        if (!st.ok()) {
          *finished = true;
          return done(st);
        }
        if (bytes < size) return;  // progress
        *finished = true;
        std::shared_ptr<StagedSink> s = *sink;
        if (!s) return done(size);  // (nothing to write)
        s->Drain([s, done, size](const Status& drained) {
          if (!drained.ok()) return done(drained);
          done(size);
        });
      });
}

void ObjectManager::ServePull(const rpc::PullObject& m, uint64_t request_id, ObjectTransfer::SendFrame send) {
  transfer_.Serve(m, request_id, std::move(send));
}

void ObjectManager::HandleReleaseHeld(const rpc::ReleaseHeld& m) {
  std::vector<std::string> ids(m.object_ids().begin(), m.object_ids().end());
  if (!m.adopt()) {
    for (size_t i = 0; i < ids.size(); ++i) {
      Unhold(m.from_node(), ids[i], static_cast<int>(i) < m.counts_size() ? m.counts(static_cast<int>(i)) : 1);
    }
    return;
  }
  // Only what is still here (its maker may have exited already: then a
  // reader finds it gone and says so). Not necessarily sealed yet: the
  // maker's SEAL comes on its own socket, and this message, from another
  // node, may be read first.
  for (const auto& id : ids) {
    if (table_.Contains(id)) HoldFor(m.from_node(), id);
  }
  if (events_) events_->OnAdopted(m.holder(), ids);
}

void ObjectManager::NodeDied(const std::string& node) {
  auto held = held_for_.find(node);
  if (held != held_for_.end()) {  // nobody is left to ask for them
    auto ids = std::move(held->second);
    held_for_.erase(held);
    for (const auto& held_id : ids) table_.RemoveRef(held_id.first);
  }
  releasing_.erase(node);
}

void ObjectManager::ReleaseIdle(std::chrono::steady_clock::time_point now) {
  transfer_.ReleaseIdle(now, kServeLinger);
}

size_t ObjectManager::num_held_for(const std::string& node) const {
  auto it = held_for_.find(node);
  return it == held_for_.end() ? 0 : it->second.size();
}

uint32_t ObjectManager::holds_for(const std::string& node, const std::string& id) const {
  auto it = held_for_.find(node);
  if (it == held_for_.end()) return 0;
  auto h = it->second.find(id);
  return h == it->second.end() ? 0 : h->second;
}

}  // namespace phalanx::objectstore
