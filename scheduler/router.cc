#include "scheduler/router.h"

#include "core/logging.h"

namespace phalanx::scheduler {

void PeerReply::operator()(const google::protobuf::MessageLite& m) const {
  if (auto c = conn_.lock()) c->Send(type_, kReplyFlag, request_id_, m);
}

void PeerReply::Send(OutFrame frame) const {
  if (auto c = conn_.lock()) c->Send(std::move(frame));
}

bool PeerReply::open() const {
  auto c = conn_.lock();
  return c && !c->closed();
}

void Router::OnClient(rpc::MessageType type, const char* what, ClientHandler handle) {
  PHALANX_CHECK(client_[type].handle == nullptr);  // (one owner per type)
  client_[type] = {what, std::move(handle)};
}

void Router::OnPeer(rpc::MessageType type, const char* what, PeerHandler handle) {
  PHALANX_CHECK(peer_[type].handle == nullptr);
  peer_[type] = {what, std::move(handle)};
}

void Router::ClientFrame(const std::shared_ptr<Client>& c, const FrameHeader& h, const char* body,
                         size_t len) const {
  auto bad = [&](const char* what) {
    PHALANX_LOG(Warning) << "malformed " << what << " from " << c->conn->peer_name() << " (pid " << c->pid
                         << "); closing its connection";
    c->conn->Close();
  };
  if (!c->registered && h.type != rpc::REGISTER_CLIENT) return bad("first message (expected registration)");
  if (h.type >= client_.size() || client_[h.type].handle == nullptr) return bad("message type");
  const auto& route = client_[h.type];
  if (!route.handle(c, h.request_id, body, len)) bad(route.what);
}

void Router::PeerFrame(const std::shared_ptr<FramedConnection>& conn, const FrameHeader& h, const char* body,
                       size_t len) const {
  auto bad = [&](const char* what) {
    PHALANX_LOG(Warning) << "malformed " << what << " from " << conn->peer_name() << "; closing the connection";
    conn->Close();
  };
  if (h.type >= peer_.size() || peer_[h.type].handle == nullptr) {
    return bad("message (not one raylets send each other)");
  }
  const auto& route = peer_[h.type];
  if (!route.handle(body, len, PeerReply(conn, h.type, h.request_id))) bad(route.what);
}

}  // namespace phalanx::scheduler
