#include "objectstore/object_manager.h"

#include <boost/asio/post.hpp>

namespace phalanx::objectstore {

ObjectManager::ObjectManager(boost::asio::io_context& io, std::string self, std::unique_ptr<ObjectStore> store,
                             std::unique_ptr<Transport> transport, ObjectPeers* peers, ObjectEvents* events,
                             TransferOptions options, TransferDirectory directory)
    : io_(io),
      self_(std::move(self)),
      peers_(peers),
      events_(events),
      directory_(directory),
      store_(std::move(store)),
      owner_(this),
      table_(store_.get(), &owner_),
      transfer_(&table_, store_.get(), std::move(transport), options, std::move(directory), self_,
                TransferRefs{[this](const std::string& node, const std::string& id) { HoldFor(node, id); },
                             [this](const std::string& node, const std::vector<std::string>& ids) {
                               Release(node, ids);
                             }}) {}

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
  if ((was_in_store || copy) && m_->directory_.unlisted) m_->directory_.unlisted(id);
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
  if (directory_.located) directory_.located(id, size, size, /*complete=*/true);
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
