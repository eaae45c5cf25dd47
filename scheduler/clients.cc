#include "scheduler/clients.h"

#include "core/frame.h"

namespace phalanx::scheduler {

std::shared_ptr<Client> Clients::Add(std::shared_ptr<FramedConnection> conn) {
  auto c = std::make_shared<Client>();
  c->conn = std::move(conn);
  all_[c.get()] = c;
  return c;
}

std::shared_ptr<Client> Clients::OfConnection(const std::shared_ptr<FramedConnection>& conn) {
  for (auto& [p, c] : all_) {
    if (c->conn == conn) return c;
  }
  return Add(conn);
}

Client* Clients::Find(const std::string& client_id) const {
  auto it = by_id_.find(client_id);
  return it == by_id_.end() ? nullptr : it->second;
}

void Clients::Remove(Client* c) {
  auto byid = by_id_.find(c->client_id);
  if (byid != by_id_.end() && byid->second == c) by_id_.erase(byid);
  all_.erase(c);
}

void Clients::ForEach(const std::function<void(Client&)>& fn) const {
  for (const auto& [p, c] : all_) fn(*c);
}

void Clients::ForEachId(const std::function<void(const std::string&)>& fn) const {
  for (const auto& [id, c] : by_id_) fn(id);
}

void Clients::Reply(Client& c, uint16_t type, uint64_t request_id, const google::protobuf::MessageLite& m) {
  c.conn->Send(type, kReplyFlag, request_id, m);
}

}  // namespace phalanx::scheduler
