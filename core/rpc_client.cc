#include "core/rpc_client.h"

#include "core/logging.h"

namespace phalanx {

namespace asio = boost::asio;

void RpcClient::ConnectTcp(asio::io_context& io, const std::string& host, int port, int64_t timeout_ms,
                           const std::string& token, std::shared_ptr<const TlsContext> tls,
                           std::function<void(Result<std::shared_ptr<RpcClient>>)> done) {
  std::string peer = host + ":" + std::to_string(port);
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    asio::post(io, [done, peer] { done(Status::InvalidArgument("bad address " + peer)); });
    return;
  }
  auto sock = std::make_shared<asio::ip::tcp::socket>(io);
  auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(timeout_ms));
  auto finished = std::make_shared<bool>(false);
  timer->async_wait([sock, finished, done, peer, timeout_ms](const boost::system::error_code& e) {
    if (e || *finished) return;
    *finished = true;
    boost::system::error_code ignored;
    sock->close(ignored);
    done(Status::TimedOut("connecting to " + peer + " took longer than " + std::to_string(timeout_ms) + " ms"));
  });
  sock->async_connect(asio::ip::tcp::endpoint(addr, static_cast<uint16_t>(port)),
                      [&io, sock, timer, finished, done, peer, token, tls](const boost::system::error_code& e) {
                        if (*finished) return;
                        *finished = true;
                        timer->cancel();
                        if (e) {
                          done(Status::Unavailable("cannot connect to " + peer + ": " + e.message()));
                          return;
                        }
                        sock->set_option(asio::ip::tcp::no_delay(true));
                        FramedConnection::Socket g(io);
                        g.assign(asio::generic::stream_protocol(AF_INET, SOCK_STREAM), sock->release());
                        auto conn = std::make_shared<FramedConnection>(std::move(g), peer);
                        conn->RequireAuth(Handshake::Role::kClient, token, peer);
                        if (tls) conn->UseTls(tls);
                        done(std::make_shared<RpcClient>(io, conn));
                      });
}

RpcClient::RpcClient(asio::io_context& io, std::shared_ptr<FramedConnection> conn)
    : io_(io), conn_(std::move(conn)) {}

void RpcClient::Start(PushHandler on_push) {
  on_push_ = std::move(on_push);
  std::weak_ptr<RpcClient> weak = shared_from_this();
  conn_->Start(
      [weak](const FrameHeader& h, const char* body, size_t len) {
        auto self = weak.lock();
        if (!self) return;
        if (h.flags & kReplyFlag) {
          self->Finish(h.request_id, Status::OK(), body, len);
        } else if (self->on_push_) {
          self->on_push_(h, body, len);
        }
      },
      [weak](const Status& why) {
        auto self = weak.lock();
        if (!self) return;
        self->FailAll(Status::Unavailable(self->conn_->peer_name() + " closed the connection" +
                                          (why.ok() ? "" : ": " + why.message())));
      });
}

void RpcClient::Call(uint16_t type, const google::protobuf::MessageLite& request, int64_t timeout_ms,
                     ReplyCallback cb) {
  CallView(type, request, timeout_ms, [cb = std::move(cb)](const Status& st, const char* body, size_t len) {
    if (!st.ok()) return cb(st);
    cb(std::string(body ? body : "", len));
  });
}

void RpcClient::CallView(uint16_t type, const google::protobuf::MessageLite& request, int64_t timeout_ms,
                         ViewCallback cb) {
  if (conn_->closed()) {
    asio::post(io_, [cb, peer = conn_->peer_name()] {
      cb(Status::Unavailable(peer + " is not connected"), nullptr, 0);
    });
    return;
  }
  uint64_t id = next_id_++;
  Pending& p = pending_[id];
  p.cb = std::move(cb);
  if (timeout_ms >= 0) {
    p.timer = std::make_unique<asio::steady_timer>(io_, std::chrono::milliseconds(timeout_ms));
    std::weak_ptr<RpcClient> weak = shared_from_this();
    p.timer->async_wait([weak, id, timeout_ms](const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self) return;
      self->Finish(id,
                   Status::TimedOut(self->conn_->peer_name() + " did not reply within " +
                                    std::to_string(timeout_ms) + " ms"),
                   nullptr, 0);
    });
  }
  conn_->Send(type, 0, id, request);
}

void RpcClient::Finish(uint64_t id, const Status& st, const char* body, size_t len) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // already timed out: a late reply is dropped
  ViewCallback cb = std::move(it->second.cb);
  if (it->second.timer) it->second.timer->cancel();
  pending_.erase(it);
  cb(st, body, len);
}

void RpcClient::FailAll(const Status& why) {
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& [id, p] : pending) {
    if (p.timer) p.timer->cancel();
    p.cb(why, nullptr, 0);
  }
}

void RpcClient::Close(const Status& why) {
  FailAll(why);
  conn_->Close();
}

}  // namespace phalanx
