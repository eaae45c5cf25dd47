#include "gcs/redis_client.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/logging.h"
#include "core/process.h"

namespace phalanx {

namespace asio = boost::asio;

RedisReply RedisReply::From(const redisReply* r) {
  RedisReply out;
  if (r == nullptr) return out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = kString; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_STATUS: out.type = kStatus; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ERROR: out.type = kError; out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_INTEGER: out.type = kInteger; out.integer = r->integer; break;
    case REDIS_REPLY_ARRAY:
      out.type = kArray;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(From(r->element[i]));
      break;
    default: out.type = kNil;
  }
  return out;
}

std::string FormatRedisCommand(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  int n = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), argv.data(), lens.data());
  PHALANX_CHECK(n >= 0 && cmd != nullptr) << "out of memory formatting a redis command";
  std::string out(cmd, static_cast<size_t>(n));
  redisFreeCommand(cmd);
  return out;
}

namespace {

// Takes every whole reply `reader` holds; false (with *why) on a protocol error.
template <typename F>
bool TakeReplies(redisReader* reader, F&& each, std::string* why) {
  while (true) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader, &reply) != REDIS_OK) {
      *why = std::string("malformed reply: ") + reader->errstr;
      return false;
    }
    if (reply == nullptr) return true;
    RedisReply r = RedisReply::From(static_cast<redisReply*>(reply));
    freeReplyObject(reply);
    each(std::move(r));
  }
}

}  // namespace

// ---- RedisConnection ----

Result<std::unique_ptr<RedisConnection>> RedisConnection::Open(const std::string& host, int port,
                                                               const std::string& password,
                                                               std::shared_ptr<const TlsContext> tls,
                                                               int64_t timeout_ms) {
  std::unique_ptr<RedisConnection> c(new RedisConnection());
  c->address_ = host + ":" + std::to_string(port);
  c->timeout_ms_ = timeout_ms;
  auto fd = ConnectTcpWithin(host, port, timeout_ms);
  if (!fd.ok()) return Status::Unavailable("cannot reach redis-server (GCS): " + fd.status().message());
  c->fd_ = fd.value();
  int one = 1;
  ::setsockopt(c->fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  c->reader_ = redisReaderCreate();
  PHALANX_CHECK(c->reader_ != nullptr) << "out of memory";
  c->stream_ = std::make_unique<BlockingStream>(c->fd_, "redis-server (GCS) at " + c->address_);
  if (tls) {
    Status st = c->stream_->StartTls(tls, std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms));
    if (!st.ok()) return Status::Unavailable(st.message());
  }
  if (!tls) {
    // A PING first, without the token: a server that does not answer in
    // Redis's protocol (a TLS port) never sees the token in plaintext.
    auto pong = c->Command({"PING"});
    bool redis = pong.ok() && (pong.value().type == RedisReply::kStatus || pong.value().type == RedisReply::kError);
    if (!redis) {
      return Status::Unavailable("redis-server (GCS) at " + c->address_ + " does not answer in plain Redis (" +
                                 (pong.ok() ? "an unexpected reply" : pong.status().message()) +
                                 "): if the cluster runs with --tls, set PHALANX_TLS=1 (phalanx start --tls)");
    }
  }
  if (!password.empty()) {
    auto r = c->Command({"AUTH", password});
    PHALANX_RETURN_IF_ERROR(r.status());
    if (r.value().type != RedisReply::kStatus) {
      return Status::Unavailable("redis-server (GCS) at " + c->address_ + " refused the cluster token (" +
                                 r.value().str + "): set PHALANX_CLUSTER_TOKEN to this cluster's");
    }
  }
  return c;
}

RedisConnection::~RedisConnection() {
  if (reader_) redisReaderFree(reader_);
  if (fd_ >= 0) ::close(fd_);
}

int RedisConnection::ReleaseFd() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

Result<RedisReply> RedisConnection::Command(const std::vector<std::string>& args) {
  return Command(args, timeout_ms_);
}

Result<RedisReply> RedisConnection::Command(const std::vector<std::string>& args, int64_t timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  BlockingStream& s = *stream_;
  auto fail = [&](const Status& st) -> Status {
    if (st.code() == StatusCode::kTimedOut) {
      return Status::TimedOut("redis-server (GCS) at " + address_ + " did not answer within " +
                              std::to_string(timeout_ms) + " ms");
    }
    return st;
  };
  Status st = s.Write(FormatRedisCommand(args), deadline);
  if (!st.ok()) return fail(st);
  char buf[16 << 10];
  while (true) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
      return Status::Unavailable("redis-server (GCS) at " + address_ + " sent a malformed reply: " + reader_->errstr);
    }
    if (reply != nullptr) {
      RedisReply r = RedisReply::From(static_cast<redisReply*>(reply));
      freeReplyObject(reply);
      return r;
    }
    auto n = s.Read(buf, sizeof(buf), deadline);
    if (!n.ok()) return fail(n.status());
    redisReaderFeed(reader_, buf, n.value());
  }
}

Result<std::vector<RedisEndpoint>> ParseRedisEndpoints(const std::string& text) {
  std::vector<RedisEndpoint> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    auto colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= item.size()) {
      return Status::InvalidArgument("a redis-server address wants HOST:PORT, got '" + item + "'");
    }
    RedisEndpoint e{item.substr(0, colon), 0};
    try {
      e.port = std::stoi(item.substr(colon + 1));
    } catch (const std::exception&) {
      return Status::InvalidArgument("bad port in redis-server address '" + item + "'");
    }
    if (e.port <= 0 || e.port > 65535) return Status::InvalidArgument("bad port in redis-server address '" + item + "'");
    out.push_back(std::move(e));
    pos = end + 1;
  }
  return out;
}

Result<std::pair<std::unique_ptr<RedisConnection>, size_t>> OpenPrimary(const std::vector<RedisEndpoint>& endpoints,
                                                                         const std::string& password,
                                                                         std::shared_ptr<const TlsContext> tls,
                                                                         int64_t timeout_ms) {
  std::string why;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const auto& e = endpoints[i];
    auto c = RedisConnection::Open(e.host, e.port, password, tls, timeout_ms);
    if (!c.ok()) {
      why += (why.empty() ? "" : "; ") + c.status().message();
      continue;
    }
    if (endpoints.size() > 1) {
      auto role = c.value()->Command({"ROLE"});
      if (!role.ok()) {
        why += (why.empty() ? "" : "; ") + role.status().message();
        continue;
      }
      const auto& r = role.value();
      bool primary = r.type != RedisReply::kArray || r.elements.empty() || r.elements[0].str == "master";
      if (!primary) {
        why += (why.empty() ? "" : "; ") + e.ToString() + " is a replica";
        continue;
      }
    }
    return std::make_pair(std::move(c).value(), i);
  }
  return Status::Unavailable(why.empty() ? "no redis-server address given" : why);
}

// ---- RedisClient ----

// One connection to redis-server on the io_context: writes what was queued
// in one turn of the loop at once, parses replies as they arrive and hands
// each to `on_reply`; the first failure goes to `on_lost`, once.
class RedisClient::Link : public std::enable_shared_from_this<Link> {
 public:
  Link(asio::io_context& io, int fd, std::unique_ptr<TlsSession> tls) : socket_(io), tls_(std::move(tls)) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    socket_.assign(asio::generic::stream_protocol(local.ss_family, SOCK_STREAM), fd);
    reader_ = redisReaderCreate();
    PHALANX_CHECK(reader_ != nullptr) << "out of memory";
    in_.resize(64 << 10);
  }
  ~Link() { redisReaderFree(reader_); }

  void Start(std::function<void(RedisReply)> on_reply, std::function<void(const std::string&)> on_lost) {
    on_reply_ = std::move(on_reply);
    on_lost_ = std::move(on_lost);
    ReadMore();
  }
  void Send(std::string bytes) {
    if (closed_) return;
    queued_ += bytes;
    if (writing_ || scheduled_) return;
    scheduled_ = true;  // after the current handler: whatever else it sends joins this write
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->scheduled_ = false;
      self->WriteMore();
    });
  }
  void Close() {
    closed_ = true;
    on_reply_ = nullptr;
    on_lost_ = nullptr;
    boost::system::error_code ec;
    socket_.close(ec);
  }

 private:
  void Fail(const std::string& why) {
    if (closed_) return;
    auto lost = std::move(on_lost_);
    Close();
    if (lost) lost(why);
  }
  void WriteMore() {
    if (closed_ || writing_ || queued_.empty()) return;
    writing_ = true;
    out_.clear();
    if (tls_) {
      Status st = tls_->Write(queued_.data(), queued_.size());
      queued_.clear();
      if (!st.ok()) return Fail(st.message());
      tls_->TakeOutput(&out_);
    } else {
      out_.swap(queued_);
    }
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto ec, size_t) {
      self->writing_ = false;
      if (ec) return self->Fail("write failed: " + ec.message());
      self->WriteMore();
    });
  }
  void ReadMore() {
    socket_.async_read_some(asio::buffer(in_), [self = shared_from_this()](auto ec, size_t n) {
      if (self->closed_) return;
      if (ec) return self->Fail(ec == asio::error::eof ? "connection closed" : ec.message());
      if (!self->OnBytes(n)) return;
      self->ReadMore();
    });
  }
  bool OnBytes(size_t n) {
    if (tls_) {
      tls_->Feed(in_.data(), n);
      char plain[16 << 10];
      while (true) {
        auto got = tls_->Read(plain, sizeof(plain));
        if (!got.ok()) {
          Fail(got.status().message());
          return false;
        }
        if (got.value() == 0) break;
        redisReaderFeed(reader_, plain, got.value());
      }
    } else {
      redisReaderFeed(reader_, in_.data(), n);
    }
    std::string why;
    auto self = shared_from_this();  // (a handler may close the client)
    bool ok = TakeReplies(reader_, [&](RedisReply r) { if (on_reply_) on_reply_(std::move(r)); }, &why);
    if (!ok) Fail(why);
    return ok && !closed_;
  }

  asio::generic::stream_protocol::socket socket_;
  std::unique_ptr<TlsSession> tls_;
  redisReader* reader_ = nullptr;
  std::vector<char> in_;
  std::string queued_;  // commands for the next write
  std::string out_;     // the write in flight
  bool writing_ = false;
  bool scheduled_ = false;
  bool closed_ = false;
  std::function<void(RedisReply)> on_reply_;
  std::function<void(const std::string&)> on_lost_;
};

RedisClient::RedisClient(asio::io_context& io, std::string host, int port, std::string password,
                         std::shared_ptr<const TlsContext> tls)
    : io_(io), host_(std::move(host)), port_(port), password_(std::move(password)), tls_(std::move(tls)) {}

RedisClient::~RedisClient() {
  StopReconnectThread();
  alive_.reset();
  connected_ = false;
  for (auto* l : {&cmd_, &sub_}) {
    if (*l) (*l)->Close();
  }
  // Callers waiting on a reply hear that none will come.
  auto waiting = std::move(sent_);
  for (auto& p : backlog_) waiting.push_back(std::move(p));
  backlog_.clear();
  for (auto& p : waiting) {
    if (p.cb) p.cb(Status::Unavailable("lost the connection to redis-server (GCS)"));
  }
}

void RedisClient::StopReconnectThread() {
  if (stop_reconnect_) stop_reconnect_->store(true);
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
}

void RedisClient::SetReconnect(int64_t deadline_ms, uint64_t backlog_bytes, std::function<void(const Status&)> on_lost,
                               std::function<void()> on_reconnected) {
  reconnect_deadline_ms_ = deadline_ms;
  if (backlog_bytes) max_backlog_bytes_ = backlog_bytes;
  on_lost_ = std::move(on_lost);
  if (on_reconnected) reconnected_cbs_.insert(reconnected_cbs_.begin(), std::move(on_reconnected));
}

void RedisClient::StartLinks(int cmd_fd, std::unique_ptr<TlsSession> cmd_tls, int sub_fd,
                             std::unique_ptr<TlsSession> sub_tls) {
  cmd_ = std::make_shared<Link>(io_, cmd_fd, std::move(cmd_tls));
  sub_ = std::make_shared<Link>(io_, sub_fd, std::move(sub_tls));
  connected_ = true;
  cmd_->Start([this](RedisReply r) { OnReply(r); }, [this](const std::string& why) { Lost(why); });
  sub_->Start([this](RedisReply r) { OnMessage(r); }, [this](const std::string& why) { Lost(why); });
}

Status RedisClient::Connect(int64_t timeout_ms) {
  // (close-on-exec: no worker, or process a task starts, inherits the GCS connection)
  std::vector<RedisEndpoint> endpoints = {RedisEndpoint{host_, port_}};
  endpoints.insert(endpoints.end(), fallbacks_.begin(), fallbacks_.end());
  PHALANX_ASSIGN_OR_RETURN(auto primary, OpenPrimary(endpoints, password_, tls_, timeout_ms));
  host_ = endpoints[primary.second].host;
  port_ = endpoints[primary.second].port;
  auto c = std::move(primary.first);
  PHALANX_ASSIGN_OR_RETURN(auto s, RedisConnection::Open(host_, port_, password_, tls_, timeout_ms));
  auto ctls = c->ReleaseTls();
  auto stls = s->ReleaseTls();
  StartLinks(c->ReleaseFd(), std::move(ctls), s->ReleaseFd(), std::move(stls));
  return Status::OK();
}

void RedisClient::Send(Pending p) {
  if (connected_) {
    cmd_->Send(p.bytes);
    sent_.push_back(std::move(p));
    return;
  }
  if (reconnecting_ && backlog_bytes_ + p.bytes.size() <= max_backlog_bytes_) {
    backlog_bytes_ += p.bytes.size();
    backlog_.push_back(std::move(p));
    return;
  }
  if (p.cb) {
    std::string why = reconnecting_ ? "redis-server (GCS) at " + address() +
                                          " is unreachable and the commands kept for it fill " +
                                          std::to_string(max_backlog_bytes_ >> 20) + " MiB"
                                    : "not connected to redis-server (GCS) at " + address();
    asio::post(io_, [cb = std::move(p.cb), why] { cb(Status::Unavailable(why)); });
  }
}

void RedisClient::Command(const std::vector<std::string>& args, ReplyCallback cb) {
  Send(Pending{FormatRedisCommand(args), std::move(cb)});
}

void RedisClient::OnReply(const RedisReply& r) {
  if (sent_.empty()) return;  // (nothing was asked: ignore)
  ReplyCallback cb = std::move(sent_.front().cb);
  sent_.pop_front();
  if (!cb) return;
  if (r.type == RedisReply::kError) {
    cb(Status::Internal("redis error: " + r.str));
    return;
  }
  cb(r);
}

void RedisClient::Subscribe(const std::string& channel, MessageCallback cb, std::function<void()> subscribed) {
  if (!connected_ && !reconnecting_) return;
  bool first = subscriptions_.find(channel) == subscriptions_.end();
  subscriptions_[channel] = std::move(cb);
  if (first) unconfirmed_[channel];
  if (subscribed) {
    auto w = unconfirmed_.find(channel);
    if (w != unconfirmed_.end()) {
      w->second.push_back(std::move(subscribed));
    } else {
      asio::post(io_, std::move(subscribed));
    }
  }
  // (while reconnecting: every channel is subscribed again on reconnect)
  if (first && connected_) sub_->Send(FormatRedisCommand({"SUBSCRIBE", channel}));
}

void RedisClient::Unsubscribe(const std::string& channel) {
  if (subscriptions_.erase(channel) == 0) return;
  unconfirmed_.erase(channel);
  if (connected_) sub_->Send(FormatRedisCommand({"UNSUBSCRIBE", channel}));
}

void RedisClient::OnMessage(const RedisReply& r) {
  if (r.type != RedisReply::kArray || r.elements.size() != 3) return;
  const std::string& kind = r.elements[0].str;
  const std::string& channel = r.elements[1].str;
  if (kind == "subscribe") {
    auto w = unconfirmed_.find(channel);
    if (w == unconfirmed_.end()) return;
    auto waiting = std::move(w->second);
    unconfirmed_.erase(w);
    for (auto& f : waiting) f();
    return;
  }
  if (kind != "message") return;
  auto it = subscriptions_.find(channel);
  if (it == subscriptions_.end()) return;
  MessageCallback cb = it->second;  // (a subscriber may unsubscribe while it runs)
  cb(channel, r.elements[2].str);
}

void RedisClient::Lost(const std::string& why) {
  if (!connected_) return;
  connected_ = false;
  for (auto* l : {&cmd_, &sub_}) (*l)->Close();
  if (reconnect_deadline_ms_ <= 0) {
    PHALANX_LOG(Error) << "lost redis-server (GCS) at " << address() << ": " << why;
    GiveUp("lost the connection to redis-server (GCS) at " + address() + ": " + why);
    return;
  }
  PHALANX_LOG(Warning) << "lost redis-server (GCS) at " << address() << ": " << why << "; keeping GCS commands and "
                       << "reconnecting for up to " << reconnect_deadline_ms_ / 1000 << " s";
  reconnecting_ = true;
  // What got no reply goes first, in the order it was sent.
  for (auto it = sent_.rbegin(); it != sent_.rend(); ++it) {
    backlog_bytes_ += it->bytes.size();
    backlog_.push_front(std::move(*it));
  }
  sent_.clear();
  // Channels confirmed before are confirmed again by the new SUBSCRIBE; nobody waits on that.
  for (const auto& [ch, cb] : subscriptions_) unconfirmed_.try_emplace(ch);
  if (on_lost_) on_lost_(Status::Unavailable("lost redis-server (GCS) at " + address() + ": " + why));

  StopReconnectThread();  // (a finished one)
  stop_reconnect_ = std::make_shared<std::atomic<bool>>(false);
  auto stop = stop_reconnect_;
  std::weak_ptr<int> alive = alive_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(reconnect_deadline_ms_);
  std::vector<RedisEndpoint> endpoints = {RedisEndpoint{host_, port_}};
  for (const auto& e : fallbacks_) {
    if (e.host != host_ || e.port != port_) endpoints.push_back(e);
  }
  reconnect_thread_ = std::thread([this, stop, alive, deadline, endpoints, password = password_, tls = tls_,
                                   first_why = why] {
    std::string last = first_why;
    while (!stop->load()) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      int64_t budget = std::min<int64_t>(1000, std::max<int64_t>(left, 1));
      auto c = OpenPrimary(endpoints, password, tls, budget);
      if (c.ok()) {
        const RedisEndpoint at = endpoints[c.value().second];
        // Ready when it answers PONG: a server loading its AOF answers LOADING.
        auto pong = c.value().first->Command({"PING"});
        if (pong.ok() && pong.value().type == RedisReply::kStatus) {
          auto s = RedisConnection::Open(at.host, at.port, password, tls, budget);
          if (s.ok()) {
            auto ctls = c.value().first->ReleaseTls();
            auto stls = s.value()->ReleaseTls();
            int cfd = c.value().first->ReleaseFd(), sfd = s.value()->ReleaseFd();
            auto ct = std::make_shared<std::unique_ptr<TlsSession>>(std::move(ctls));
            auto st = std::make_shared<std::unique_ptr<TlsSession>>(std::move(stls));
            asio::post(io_, [this, alive, at, cfd, sfd, ct, st] {
              if (alive.expired()) {
                ::close(cfd);
                ::close(sfd);
                return;
              }
              Reconnected(at, cfd, std::move(*ct), sfd, std::move(*st));
            });
            return;
          }
          last = s.status().message();
        } else {
          last = pong.ok() ? "it answers " + pong.value().str : pong.status().message();
        }
      } else {
        last = c.status().message();
      }
      for (int i = 0; i < 4 && !stop->load() && std::chrono::steady_clock::now() < deadline; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (stop->load()) return;
    asio::post(io_, [this, alive, last] {
      if (alive.expired()) return;
      GiveUp("redis-server (GCS) at " + address() + " was unreachable for " +
             std::to_string(reconnect_deadline_ms_ / 1000) + " s (the reconnect deadline): " + last);
    });
  });
}

void RedisClient::Reconnected(RedisEndpoint at, int cmd_fd, std::unique_ptr<TlsSession> cmd_tls, int sub_fd,
                              std::unique_ptr<TlsSession> sub_tls) {
  if (!reconnecting_) {  // (gave up meanwhile)
    ::close(cmd_fd);
    ::close(sub_fd);
    return;
  }
  if (at.host != host_ || at.port != port_) {
    PHALANX_LOG(Warning) << "redis-server (GCS) moved from " << address() << " to " << at.ToString()
                         << " (the primary now)";
    host_ = at.host;
    port_ = at.port;
  }
  reconnecting_ = false;
  ++reconnects_;
  StartLinks(cmd_fd, std::move(cmd_tls), sub_fd, std::move(sub_tls));
  auto kept = std::move(backlog_);
  backlog_.clear();
  backlog_bytes_ = 0;
  PHALANX_LOG(Info) << "reconnected to redis-server (GCS) at " << address() << "; sending the " << kept.size()
                    << " commands kept meanwhile";
  for (auto& p : kept) Send(std::move(p));
  // The OnReconnected callbacks read what was published while away, so they
  // run once every channel is subscribed again: a message published between
  // their reads and the SUBSCRIBE would be lost. Redis confirms a SUBSCRIBE's
  // channels in order: the last one's confirmation covers them all.
  auto run_reconnected = [this] {
    auto cbs = reconnected_cbs_;
    for (auto& f : cbs) {
      if (connected_) f();
    }
  };
  if (subscriptions_.empty()) return run_reconnected();
  std::vector<std::string> args = {"SUBSCRIBE"};
  for (const auto& [ch, cb] : subscriptions_) args.push_back(ch);
  unconfirmed_[args.back()].push_back(run_reconnected);
  sub_->Send(FormatRedisCommand(args));
}

void RedisClient::GiveUp(const std::string& why) {
  if (gave_up_) return;
  gave_up_ = true;
  reconnecting_ = false;
  connected_ = false;
  auto waiting = std::move(sent_);
  for (auto& p : backlog_) waiting.push_back(std::move(p));
  backlog_.clear();
  backlog_bytes_ = 0;
  for (auto& p : waiting) {
    if (p.cb) p.cb(Status::Unavailable(why));
  }
  if (on_disconnect_) on_disconnect_(Status::Unavailable(why));
}

}  // namespace phalanx
