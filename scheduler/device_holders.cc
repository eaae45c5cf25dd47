#include "scheduler/device_holders.h"

#include <algorithm>

#include <boost/asio/post.hpp>

#include "core/ids.h"
#include "core/logging.h"
#include "core/message_limits.h"
#include "core/status_proto.h"

namespace phalanx::scheduler {

DeviceHolders::DeviceHolders(boost::asio::io_context& io, const objectstore::ObjectTable* objects, Clients* clients)
    : io_(io), objects_(objects), clients_(clients) {}

void DeviceHolders::AddRoutes(Router& router) {
  router.OnClient(rpc::DEVICE_HELD, "device held",
                  [this](const std::shared_ptr<Client>& c, uint64_t, const char* b, size_t n) {
                    rpc::ObjectIds m;
                    if (!ParseBody(&m, b, n) || !AllObjectIds(m.object_ids())) return false;
                    Held(*c, m);
                    return true;
                  });
}

void DeviceHolders::Held(Client& c, const rpc::ObjectIds& m) {
  auto& mine = held_by_[c.client_id];
  for (const auto& id : m.object_ids()) {
    if (objects_->WasFreed(id)) {  // (a retried task's return, freed already): let it go at once
      Tell(c.client_id, id);
      continue;
    }
    if (mine.count(id)) continue;
    if (mine.size() >= kMaxPerClient) {
      c.conn->Send(rpc::CLIENT_WARNING, 0, 0,
                   ToProto(Status::OutOfMemory(
                       "this process keeps more than " + std::to_string(kMaxPerClient) +
                       " GPU objects alive; the raylet stops tracking more (their GPU memory is never freed)")));
      return;
    }
    mine.insert(id);
    holders_[id].push_back(c.client_id);
  }
  if (mine.empty()) held_by_.erase(c.client_id);
}

void DeviceHolders::OnObjectFreed(const std::string& id) {
  auto it = holders_.find(id);
  if (it == holders_.end()) return;
  for (const auto& client_id : it->second) {
    auto h = held_by_.find(client_id);
    if (h != held_by_.end()) {
      h->second.erase(id);
      if (h->second.empty()) held_by_.erase(h);
    }
    Tell(client_id, id);
  }
  holders_.erase(it);
}

void DeviceHolders::Tell(const std::string& client_id, const std::string& id) {
  to_tell_[client_id].add_object_ids(id);
  if (flush_posted_) return;
  flush_posted_ = true;
  boost::asio::post(io_, [this] { Flush(); });
}

void DeviceHolders::Flush() {
  flush_posted_ = false;
  auto batch = std::move(to_tell_);
  to_tell_.clear();
  for (const auto& [client_id, ids] : batch) {
    Client* c = clients_->Find(client_id);
    if (c != nullptr && !c->conn->closed()) c->conn->Send(rpc::DEVICE_OBJECTS_FREED, 0, 0, ids);
  }
}

void DeviceHolders::OnClientGone(Client& c, const std::string&) {
  auto h = held_by_.find(c.client_id);
  to_tell_.erase(c.client_id);
  if (h == held_by_.end()) return;
  for (const auto& id : h->second) {
    auto it = holders_.find(id);
    if (it == holders_.end()) continue;
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), c.client_id), v.end());
    if (v.empty()) holders_.erase(it);
  }
  held_by_.erase(h);
}

}  // namespace phalanx::scheduler
