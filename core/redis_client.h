// RedisClient: hiredis's asynchronous API driven by an Asio io_context.
//
// Commands are queued by hiredis and written when the socket is writable, so a
// burst of commands goes out pipelined in as few writes as the kernel allows;
// replies come back through callbacks on the io_context thread. A second
// hiredis context carries SUBSCRIBE (a subscribed connection can do nothing
// else). Not thread-safe: use from the io_context's thread only.
// Lives on: the io_context given to the constructor (the raylet's main loop).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>

#include "core/status.h"

struct redisAsyncContext;
struct redisReply;

namespace phalanx {

// A Redis reply, copied out of hiredis's structure.
struct RedisReply {
  enum Type { kString, kArray, kInteger, kNil, kStatus, kError } type = kNil;
  std::string str;
  long long integer = 0;
  std::vector<RedisReply> elements;
  static RedisReply From(const redisReply* r);
};

class RedisAsioContext;  // hiredis <-> Asio glue, one per hiredis context

class RedisClient {
 public:
  using ReplyCallback = std::function<void(Result<RedisReply>)>;
  using MessageCallback = std::function<void(const std::string& channel, const std::string& payload)>;
  using DisconnectCallback = std::function<void(const Status& why)>;

  // `password`: the cluster's shared token (redis-server --requirepass); empty for none.
  RedisClient(boost::asio::io_context& io, std::string host, int port, std::string password = "");
  ~RedisClient();

  // Checks the server answers PING within `timeout_ms` (a short blocking
  // probe), then opens the asynchronous contexts. Unavailable names the server.
  Status Connect(int64_t timeout_ms);
  // Queues a command; `cb` (may be empty) runs on the io_context with the reply
  // or with Unavailable if the connection is lost first.
  void Command(const std::vector<std::string>& args, ReplyCallback cb = nullptr);
  // Subscribes to `channel`; `cb` runs for each message. `subscribed` (may
  // be empty) runs once the server has confirmed the subscription: from then
  // on no message published to the channel is missed.
  void Subscribe(const std::string& channel, MessageCallback cb, std::function<void()> subscribed = nullptr);
  void Unsubscribe(const std::string& channel);
  // Called once if either connection to the server is lost.
  void SetDisconnectCallback(DisconnectCallback cb) { on_disconnect_ = std::move(cb); }
  bool connected() const { return connected_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  // Commands sent whose replies have not arrived.
  size_t pending() const { return pending_; }

 private:
  struct Pending;
  static void OnReply(redisAsyncContext* ac, void* reply, void* privdata);
  static void OnMessage(redisAsyncContext* ac, void* reply, void* privdata);
  static void OnDisconnect(const redisAsyncContext* ac, int status);
  void Lost(const std::string& why);

  boost::asio::io_context& io_;
  std::string host_;
  int port_;
  std::string password_;
  redisAsyncContext* cmd_ = nullptr;
  redisAsyncContext* sub_ = nullptr;
  std::unique_ptr<RedisAsioContext> cmd_glue_;
  std::unique_ptr<RedisAsioContext> sub_glue_;
  std::unordered_map<std::string, MessageCallback> subscriptions_;
  // channel -> callbacks waiting for its confirmation (absent once confirmed)
  std::unordered_map<std::string, std::vector<std::function<void()>>> unconfirmed_;
  DisconnectCallback on_disconnect_;
  bool connected_ = false;
  size_t pending_ = 0;
};

}  // namespace phalanx
