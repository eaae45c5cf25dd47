#include "core/redis_client.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

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

// Watches one hiredis context's socket on the io_context and calls hiredis's
// read/write handlers when it is ready, as hiredis's event hooks ask.
class RedisAsioContext {
 public:
  RedisAsioContext(asio::io_context& io, redisAsyncContext* ac) : ac_(ac), socket_(io, ac->c.fd) {
    ac->ev.data = this;
    ac->ev.addRead = [](void* p) { static_cast<RedisAsioContext*>(p)->Want(true, true); };
    ac->ev.delRead = [](void* p) { static_cast<RedisAsioContext*>(p)->Want(true, false); };
    ac->ev.addWrite = [](void* p) { static_cast<RedisAsioContext*>(p)->Want(false, true); };
    ac->ev.delWrite = [](void* p) { static_cast<RedisAsioContext*>(p)->Want(false, false); };
    ac->ev.cleanup = [](void* p) { static_cast<RedisAsioContext*>(p)->Detach(); };
  }
  ~RedisAsioContext() { Detach(); }

  void Detach() {
    if (ac_ == nullptr) return;
    ac_ = nullptr;
    boost::system::error_code ec;
    socket_.cancel(ec);
    socket_.release();  // hiredis owns and closes the fd
  }

 private:
  void Want(bool read, bool on) {
    (read ? want_read_ : want_write_) = on;
    Arm();
  }
  void Arm() {
    if (ac_ == nullptr) return;
    if (want_read_ && !read_armed_) {
      read_armed_ = true;
      socket_.async_wait(asio::posix::stream_descriptor::wait_read, [this, alive = alive_](auto ec) {
        if (!*alive) return;
        read_armed_ = false;
        if (ec || ac_ == nullptr) return;
        if (want_read_) redisAsyncHandleRead(ac_);
        Arm();
      });
    }
    if (want_write_ && !write_armed_) {
      write_armed_ = true;
      socket_.async_wait(asio::posix::stream_descriptor::wait_write, [this, alive = alive_](auto ec) {
        if (!*alive) return;
        write_armed_ = false;
        if (ec || ac_ == nullptr) return;
        if (want_write_) redisAsyncHandleWrite(ac_);
        Arm();
      });
    }
  }

 public:
  // Set false before destruction so callbacks already queued do nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);

 private:
  redisAsyncContext* ac_;
  asio::posix::stream_descriptor socket_;
  bool want_read_ = false, want_write_ = false;
  bool read_armed_ = false, write_armed_ = false;
};

struct RedisClient::Pending {
  RedisClient* self;
  ReplyCallback cb;
};

RedisClient::RedisClient(asio::io_context& io, std::string host, int port, std::string password)
    : io_(io), host_(std::move(host)), port_(port), password_(std::move(password)) {}

RedisClient::~RedisClient() {
  connected_ = false;
  for (auto* glue : {cmd_glue_.get(), sub_glue_.get()}) {
    if (glue) *glue->alive_ = false;
  }
  // redisAsyncFree runs pending callbacks with a null reply; they see !connected_.
  if (cmd_) { cmd_->data = nullptr; redisAsyncFree(cmd_); }
  if (sub_) { sub_->data = nullptr; redisAsyncFree(sub_); }
}

Status RedisClient::Connect(int64_t timeout_ms) {
  timeval tv{static_cast<time_t>(timeout_ms / 1000), static_cast<suseconds_t>((timeout_ms % 1000) * 1000)};
  redisContext* probe = redisConnectWithTimeout(host_.c_str(), port_, tv);
  if (probe == nullptr || probe->err) {
    std::string why = probe ? probe->errstr : "out of memory";
    if (probe) redisFree(probe);
    return Status::Unavailable("cannot reach redis-server (GCS) at " + address() + ": " + why);
  }
  redisSetTimeout(probe, tv);
  if (!password_.empty()) {
    auto* a = static_cast<redisReply*>(redisCommand(probe, "AUTH %b", password_.data(), password_.size()));
    bool authed = a != nullptr && a->type == REDIS_REPLY_STATUS;
    if (a) freeReplyObject(a);
    if (!authed) {
      redisFree(probe);
      return Status::Unavailable("redis-server (GCS) at " + address() + " refused the cluster token");
    }
  }
  auto* r = static_cast<redisReply*>(redisCommand(probe, "PING"));
  bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
  std::string why = r == nullptr ? std::string(probe->errstr) : std::string(r->str ? r->str : "");
  if (r) freeReplyObject(r);
  redisFree(probe);
  if (!ok) return Status::Unavailable("redis-server (GCS) at " + address() + " did not answer PING: " + why);

  for (auto** ctx : {&cmd_, &sub_}) {
    *ctx = redisAsyncConnect(host_.c_str(), port_);
    if (*ctx == nullptr || (*ctx)->err) {
      return Status::Unavailable("cannot reach redis-server (GCS) at " + address());
    }
    (*ctx)->data = this;
    SetCloseOnExec((*ctx)->c.fd);  // no worker (or process a task starts) inherits the GCS connection
    redisAsyncSetDisconnectCallback(*ctx, &RedisClient::OnDisconnect);
  }
  cmd_glue_ = std::make_unique<RedisAsioContext>(io_, cmd_);
  sub_glue_ = std::make_unique<RedisAsioContext>(io_, sub_);
  connected_ = true;
  if (!password_.empty()) {  // queued first on each connection, so everything after is authorized
    for (auto* ctx : {cmd_, sub_}) {
      const char* argv[] = {"AUTH", password_.data()};
      size_t lens[] = {4, password_.size()};
      redisAsyncCommandArgv(ctx, nullptr, nullptr, 2, argv, lens);
    }
  }
  return Status::OK();
}

void RedisClient::Command(const std::vector<std::string>& args, ReplyCallback cb) {
  if (!connected_) {
    if (cb) {
      asio::post(io_, [cb, addr = address()] {
        cb(Status::Unavailable("not connected to redis-server (GCS) at " + addr));
      });
    }
    return;
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* p = new Pending{this, std::move(cb)};
  ++pending_;
  if (redisAsyncCommandArgv(cmd_, &RedisClient::OnReply, p, static_cast<int>(argv.size()), argv.data(),
                            lens.data()) != REDIS_OK) {
    --pending_;
    auto cb2 = std::move(p->cb);
    delete p;
    if (cb2) cb2(Status::Unavailable("redis-server (GCS) at " + address() + " refused the command"));
  }
}

void RedisClient::OnReply(redisAsyncContext* ac, void* reply, void* privdata) {
  auto* p = static_cast<Pending*>(privdata);
  std::unique_ptr<Pending> owner(p);
  auto* self = static_cast<RedisClient*>(ac->data);
  if (self) --self->pending_;
  if (!p->cb) return;
  if (reply == nullptr || self == nullptr) {
    p->cb(Status::Unavailable("lost the connection to redis-server (GCS)"));
    return;
  }
  RedisReply r = RedisReply::From(static_cast<redisReply*>(reply));
  if (r.type == RedisReply::kError) {
    p->cb(Status::Internal("redis error: " + r.str));
    return;
  }
  p->cb(std::move(r));
}

void RedisClient::Subscribe(const std::string& channel, MessageCallback cb, std::function<void()> subscribed) {
  if (!connected_) return;
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
  if (!first) return;
  const char* argv[] = {"SUBSCRIBE", channel.data()};
  size_t lens[] = {9, channel.size()};
  redisAsyncCommandArgv(sub_, &RedisClient::OnMessage, nullptr, 2, argv, lens);
}

void RedisClient::Unsubscribe(const std::string& channel) {
  if (!connected_ || subscriptions_.erase(channel) == 0) return;
  unconfirmed_.erase(channel);
  const char* argv[] = {"UNSUBSCRIBE", channel.data()};
  size_t lens[] = {11, channel.size()};
  redisAsyncCommandArgv(sub_, &RedisClient::OnMessage, nullptr, 2, argv, lens);
}

void RedisClient::OnMessage(redisAsyncContext* ac, void* reply, void*) {
  auto* self = static_cast<RedisClient*>(ac->data);
  auto* r = static_cast<redisReply*>(reply);
  if (self == nullptr || r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 3) return;
  std::string kind(r->element[0]->str, r->element[0]->len);
  std::string channel(r->element[1]->str, r->element[1]->len);
  if (kind == "subscribe") {
    auto w = self->unconfirmed_.find(channel);
    if (w == self->unconfirmed_.end()) return;
    auto waiting = std::move(w->second);
    self->unconfirmed_.erase(w);
    for (auto& f : waiting) f();
    return;
  }
  if (kind != "message") return;
  auto it = self->subscriptions_.find(channel);
  if (it == self->subscriptions_.end()) return;
  MessageCallback cb = it->second;  // (a subscriber may unsubscribe while it runs)
  cb(channel, std::string(r->element[2]->str, r->element[2]->len));
}

void RedisClient::OnDisconnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<RedisClient*>(ac->data);
  if (self == nullptr) return;
  if (ac == self->cmd_) { self->cmd_glue_->Detach(); self->cmd_ = nullptr; }
  if (ac == self->sub_) { self->sub_glue_->Detach(); self->sub_ = nullptr; }
  self->Lost(status == REDIS_OK ? "connection closed" : (ac->errstr ? ac->errstr : "connection lost"));
}

void RedisClient::Lost(const std::string& why) {
  if (!connected_) return;
  connected_ = false;
  PHALANX_LOG(Error) << "lost redis-server (GCS) at " << address() << ": " << why;
  if (cmd_) { cmd_->data = nullptr; redisAsyncDisconnect(cmd_); cmd_ = nullptr; }
  if (sub_) { sub_->data = nullptr; redisAsyncDisconnect(sub_); sub_ = nullptr; }
  if (on_disconnect_) on_disconnect_(Status::Unavailable("lost redis-server (GCS) at " + address() + ": " + why));
}

}  // namespace phalanx
