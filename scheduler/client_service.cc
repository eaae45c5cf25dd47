#include "scheduler/client_service.h"

#include <sys/un.h>
#include <unistd.h>

#include "core/ids.h"
#include "core/logging.h"
#include "core/process.h"
#include "core/status_proto.h"

namespace phalanx::scheduler {

namespace asio = boost::asio;
using asio::local::stream_protocol;

ClientService::ClientService(asio::io_context& io, std::string node_id, const RayletOptions& options, Router* router,
                             Clients* clients, WorkerPool* pool, objectstore::ObjectManager* objects,
                             const RedisClient* redis, ObjectRequests* requests, TaskQueue* tasks,
                             std::vector<ClientWatcher*> watchers)
    : io_(io),
      node_id_(std::move(node_id)),
      options_(options),
      router_(router),
      clients_(clients),
      pool_(pool),
      objects_(objects),
      redis_(redis),
      requests_(requests),
      tasks_(tasks),
      watchers_(std::move(watchers)),
      acceptor_(io),
      accept_retry_(io) {}

void ClientService::AddRoutes(Router& router) {
  router.OnClient(rpc::REGISTER_CLIENT, "registration",
                  [this](const std::shared_ptr<Client>& c, uint64_t req, const char* b, size_t n) {
                    rpc::RegisterClient m;
                    if (!ParseBody(&m, b, n)) return false;
                    HandleRegister(c, req, m);
                    return true;
                  });
}

Status ClientService::Listen() {
  const std::string& path = options_.socket_path;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return Status::InvalidArgument("socket path is too long for a Unix socket (" + std::to_string(path.size()) +
                                   " bytes, at most " + std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                                   "): " + path);
  }
  ::unlink(path.c_str());
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  if (!ec) SetCloseOnExec(acceptor_.native_handle());
  // Only this user may connect (connect() needs write permission on the socket).
  mode_t old_mask = ::umask(0077);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(path), ec);
  ::umask(old_mask);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen on " + path + ": " + ec.message());
  Accept();
  return Status::OK();
}

void ClientService::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, stream_protocol::socket sock) {
    if (stopped_) return;
    if (ec) {
      PHALANX_LOG(Warning) << "accept failed: " << ec.message();
      // Out of descriptors, say: try again shortly rather than spin.
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopped_) Accept();
      });
      return;
    } else if (Status who = CheckPeerUser(sock.native_handle()); !who.ok()) {
      PHALANX_LOG(Warning) << "refused a client on " << options_.socket_path << ": " << who.message();
    } else {
      SetCloseOnExec(sock.native_handle());
      FramedConnection::Socket generic(io_);
      generic.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), sock.release());
      auto c = clients_->Add(std::make_shared<FramedConnection>(std::move(generic), "client"));
      std::weak_ptr<Client> weak = c;
      c->conn->Start(
          [this, weak](const FrameHeader& h, const char* body, size_t len) {
            if (auto cl = weak.lock()) router_->ClientFrame(cl, h, body, len);
          },
          [this, weak](const Status& why) {
            if (auto cl = weak.lock()) OnClose(cl, why);
          });
    }
    Accept();
  });
}

void ClientService::HandleRegister(const std::shared_ptr<Client>& c, uint64_t req, const rpc::RegisterClient& m) {
  rpc::RegisterClientReply r;
  if (m.client_id().size() != kClientIdSize) {
    // (Said, not closed: a close now would drop the reply, and the client would only see its connection go.)
    *r.mutable_status() = ToProto(Status::InvalidArgument("malformed client id: " + std::to_string(m.client_id().size()) +
                                                          " bytes, not " + std::to_string(kClientIdSize)));
    Clients::Reply(*c, rpc::REGISTER_CLIENT, req, r);
    return;
  }
  c->pid = m.pid();
  c->client_id = m.client_id();
  c->is_worker = m.is_worker();
  if (m.is_worker()) {
    c->worker = pool_->Register(m.worker_token(), m.pid(), c->conn);
    if (c->worker == nullptr) {
      *r.mutable_status() =
          ToProto(Status::InvalidArgument("unknown worker token: this raylet did not start that worker"));
      Clients::Reply(*c, rpc::REGISTER_CLIENT, req, r);
      return;
    }
    c->worker->client_id = c->client_id;
  }
  c->registered = true;
  objectstore::ObjectStore& store = objects_->store();
  r.set_node_id(node_id_);
  r.set_store_capacity(store.Stats().capacity);
  r.set_session_dir(options_.session_dir);
  r.set_gcs_address(redis_->addresses());
  r.set_inline_threshold(options_.inline_threshold);
  r.set_node_address(options_.node_ip);
  r.set_cluster_token(options_.cluster_token);
  r.set_tls(options_.tls != nullptr);
  clients_->Registered(c.get());
  requests_->ClientRegistered(c->client_id);
  Status st = c->conn->SendWithFd(EncodeFrame(rpc::REGISTER_CLIENT, kReplyFlag, req, r), store.region().fd());
  if (!st.ok()) {
    PHALANX_LOG(Warning) << st.ToString();
    c->conn->Close();
    return;
  }
  if (c->worker) tasks_->OnWorkerRegistered(c->worker);
}

void ClientService::OnClose(const std::shared_ptr<Client>& c, const Status& why) {
  if (!stopped_) {
    std::string who = std::string(c->is_worker ? "worker" : "driver") + " process " + std::to_string(c->pid) +
                      " on node " + ToHex(node_id_).substr(0, 12) + " exited" +
                      (why.ok() ? "" : " (" + why.message() + ")");
    for (ClientWatcher* w : watchers_) w->OnClientGone(*c, who);
  }
  if (c->worker != nullptr) {
    // The exit status usually follows the closed socket by a moment; wait
    // briefly for SIGCHLD so the error can say how the worker died.
    std::string token = c->worker->token;
    std::string why_text = "worker process " + std::to_string(c->pid) + " disconnected" +
                           (why.ok() ? "" : " (" + why.message() + ")");
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
    timer->async_wait([this, timer, token, why_text](auto) {
      if (Worker* w = pool_->Find(token)) pool_->MarkDead(w, why_text);
    });
    c->worker = nullptr;
  }
  clients_->Remove(c.get());
}

void ClientService::Stop(const std::string& why) {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  accept_retry_.cancel();
  rpc::Status s = ToProto(Status::Unavailable(why));
  clients_->ForEach([&](Client& c) {
    if (!c.is_worker) c.conn->Send(rpc::RAYLET_FAILING, 0, 0, s);
  });
  ::unlink(options_.socket_path.c_str());
}

}  // namespace phalanx::scheduler
