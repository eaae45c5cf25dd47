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
//
// When the server goes away (killed, restarted, a replica promoted behind
// the same address) and a reconnect deadline is set (SetReconnect), the
// client keeps every command that got no reply and every new one in order,
// tries again every 200 ms (on a thread of its own: the loop never blocks on
// a connect), and once the server answers PING with PONG (an AOF loaded)
// subscribes to its channels again, sends what it kept, and runs the
// reconnect callbacks (the owner re-publishes what it owns: a restarted
// server may have lost the last second). A command is sent again if its
// reply never came, so commands must be safe to repeat (the GCS's are: HSET,
// HDEL, PUBLISH, and scripts that set rather than add). Past the deadline the
// kept commands fail with Unavailable and the disconnect callback runs.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
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

struct RedisEndpoint {
  std::string host;
  int port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
};
// "HOST:PORT[,HOST:PORT...]" (a primary and its replicas) as endpoints.
Result<std::vector<RedisEndpoint>> ParseRedisEndpoints(const std::string& text);

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
  // The same within `timeout_ms` (a blocking command such as BLPOP waits longer
  // than the rest). After a failure the connection's state is unknown: drop it.
  Result<RedisReply> Command(const std::vector<std::string>& args, int64_t timeout_ms);
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

// The first of `endpoints` that answers as a primary (ROLE "master"; with
// one endpoint, whatever answers), and its index. Unavailable says why each failed.
Result<std::pair<std::unique_ptr<RedisConnection>, size_t>> OpenPrimary(const std::vector<RedisEndpoint>& endpoints,
                                                                         const std::string& password,
                                                                         std::shared_ptr<const TlsContext> tls,
                                                                         int64_t timeout_ms);

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

  // Other servers to try after a loss (replicas that may be promoted):
  // whichever answers as the primary first is used from then on.
  void SetFallbacks(std::vector<RedisEndpoint> others) { fallbacks_ = std::move(others); }
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
  // Called once when the server is gone for good: at once when a connection
  // is lost and no reconnect deadline is set, else when the deadline passes.
  void SetDisconnectCallback(DisconnectCallback cb) { on_disconnect_ = std::move(cb); }
  // Keep commands and reconnect for up to `deadline_ms` after a loss (0: do
  // not; the default). `backlog_bytes`: the most kept in the meantime (a
  // command beyond it fails at once). `on_lost` runs when a loss starts a
  // reconnect, `on_reconnected` once the server is back (either may be empty).
  void SetReconnect(int64_t deadline_ms, uint64_t backlog_bytes, std::function<void(const Status&)> on_lost,
                    std::function<void()> on_reconnected);
  // Adds a callback run after each reconnect (after SetReconnect's own), once
  // every channel is subscribed again (what it reads then misses no message).
  void OnReconnected(std::function<void()> cb) { reconnected_cbs_.push_back(std::move(cb)); }
  bool connected() const { return connected_; }
  // Lost and trying to reconnect (commands are kept meanwhile).
  bool reconnecting() const { return reconnecting_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  // The server in use, then the fallbacks: "HOST:PORT[,HOST:PORT...]".
  std::string addresses() const {
    std::string out = address();
    for (const auto& e : fallbacks_) {
      if (e.host != host_ || e.port != port_) out += "," + e.ToString();
    }
    return out;
  }
  // Commands sent whose replies have not arrived.
  size_t pending() const { return sent_.size(); }
  // Losses survived so far (each one reconnected).
  int reconnects() const { return reconnects_; }

 private:
  class Link;  // one connection: its socket, TLS channel, write queue and reply parser
  struct Pending {
    std::string bytes;  // the command as sent (sent again after a reconnect)
    ReplyCallback cb;
  };
  void Send(Pending p);
  void OnReply(const RedisReply& r);
  void OnMessage(const RedisReply& r);
  void Lost(const std::string& why);
  void StartLinks(int cmd_fd, std::unique_ptr<TlsSession> cmd_tls, int sub_fd, std::unique_ptr<TlsSession> sub_tls);
  void Reconnected(RedisEndpoint at, int cmd_fd, std::unique_ptr<TlsSession> cmd_tls, int sub_fd,
                   std::unique_ptr<TlsSession> sub_tls);
  void GiveUp(const std::string& why);
  void StopReconnectThread();

  boost::asio::io_context& io_;
  std::string host_;
  int port_;
  std::string password_;
  std::shared_ptr<const TlsContext> tls_;
  std::shared_ptr<Link> cmd_;
  std::shared_ptr<Link> sub_;
  std::vector<RedisEndpoint> fallbacks_;
  std::deque<Pending> sent_;     // one per command sent on cmd_ whose reply has not come, in order
  std::deque<Pending> backlog_;  // kept while reconnecting, in order
  uint64_t backlog_bytes_ = 0;
  std::unordered_map<std::string, MessageCallback> subscriptions_;
  // channel -> callbacks waiting for its confirmation (absent once confirmed)
  std::unordered_map<std::string, std::vector<std::function<void()>>> unconfirmed_;
  DisconnectCallback on_disconnect_;
  bool connected_ = false;
  bool reconnecting_ = false;
  bool gave_up_ = false;
  int reconnects_ = 0;
  int64_t reconnect_deadline_ms_ = 0;
  uint64_t max_backlog_bytes_ = 256ull << 20;
  std::function<void(const Status&)> on_lost_;
  std::vector<std::function<void()>> reconnected_cbs_;
  std::thread reconnect_thread_;
  std::shared_ptr<std::atomic<bool>> stop_reconnect_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // handlers posted by the reconnect thread check it
};

}  // namespace phalanx
