// Redis (the GCS's store) for phalanx processes, over plain TCP or TLS
// (--tls, core/tls.h). hiredis formats the commands and parses the replies
// (its protocol code); the bytes travel through phalanx's own sockets, so
// the same TLS engine as every other connection carries them.
//
// RedisConnection: one blocking connection with a deadline on every call
// (the CLI, the Python and C++ APIs' GCS reads, RedisClient's start-up).
//
// RedisClient: asynchronous, on an Asio io_context. Commands queued within
// one turn of the loop go out pipelined in one write; replies come back
// through callbacks on the io_context thread. A second connection carries
// SUBSCRIBE (a subscribed connection can do nothing else). Not thread-safe:
// use from the io_context's thread only. Lives on: the io_context given to
// the constructor (the raylet's main loop).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>

#include "core/status.h"
#include "core/tls.h"

struct redisReply;
struct redisReader;

namespace phalanx {

// A Redis reply, copied out of hiredis's structure.
struct RedisReply {
  enum Type { kString, kArray, kInteger, kNil, kStatus, kError } type = kNil;
  std::string str;
  long long integer = 0;
  std::vector<RedisReply> elements;
  static RedisReply From(const redisReply* r);
};

// Encodes one command in Redis's protocol (RESP).
std::string FormatRedisCommand(const std::vector<std::string>& args);

class RedisConnection {
 public:
  // Connects to host:port, runs TLS when `tls` is set, and AUTHs with
  // `password` when non-empty, all within `timeout_ms`; later commands get
  // `timeout_ms` each. Unavailable/TimedOut name the server and say why
  // (unreachable, refused the token, TLS on one side only).
  static Result<std::unique_ptr<RedisConnection>> Open(const std::string& host, int port, const std::string& password,
                                                       std::shared_ptr<const TlsContext> tls, int64_t timeout_ms);
  ~RedisConnection();
  // One command and its reply (an error reply is a kError reply, not a Status).
  Result<RedisReply> Command(const std::vector<std::string>& args);
  // Hands the socket and its TLS channel over (to RedisClient); the connection is spent.
  int ReleaseFd();
  std::unique_ptr<TlsSession> ReleaseTls() { return stream_->ReleaseTls(); }

 private:
  RedisConnection() = default;
  std::string address_;
  int fd_ = -1;
  int64_t timeout_ms_ = 0;
  std::unique_ptr<BlockingStream> stream_;  // over fd_, through TLS or not
  redisReader* reader_ = nullptr;
};

class RedisClient {
 public:
  using ReplyCallback = std::function<void(Result<RedisReply>)>;
  using MessageCallback = std::function<void(const std::string& channel, const std::string& payload)>;
  using DisconnectCallback = std::function<void(const Status& why)>;

  // `password`: the cluster's shared token (redis-server's requirepass);
  // empty for none. `tls`: the cluster's TLS context (null: plain TCP).
  RedisClient(boost::asio::io_context& io, std::string host, int port, std::string password = "",
              std::shared_ptr<const TlsContext> tls = nullptr);
  ~RedisClient();

  // Opens both connections (authenticated) within `timeout_ms`, blocking.
  // Unavailable names the server.
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
  size_t pending() const { return callbacks_.size(); }

 private:
  class Link;  // one connection: its socket, TLS channel, write queue and reply parser
  void OnReply(const RedisReply& r);
  void OnMessage(const RedisReply& r);
  void Lost(const std::string& why);

  boost::asio::io_context& io_;
  std::string host_;
  int port_;
  std::string password_;
  std::shared_ptr<const TlsContext> tls_;
  std::shared_ptr<Link> cmd_;
  std::shared_ptr<Link> sub_;
  std::deque<ReplyCallback> callbacks_;  // one per command sent on cmd_, in order
  std::unordered_map<std::string, MessageCallback> subscriptions_;
  // channel -> callbacks waiting for its confirmation (absent once confirmed)
  std::unordered_map<std::string, std::vector<std::function<void()>>> unconfirmed_;
  DisconnectCallback on_disconnect_;
  bool connected_ = false;
};

}  // namespace phalanx
