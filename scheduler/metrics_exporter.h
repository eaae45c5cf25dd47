// MetricsExporter: the node's Prometheus endpoint. An HTTP/1.1 listener on
// the node's address (--metrics-export-port; 0 picks a free port, which the
// node's record in the GCS gives as metrics_export_port) that answers
// `GET /metrics` with the page its MetricsSource writes, in Prometheus's text
// format, and closes the connection. Bound to a loopback address it serves
// anyone on this machine; on any other address a request must carry the
// cluster token (`Authorization: Bearer TOKEN`, Prometheus's
// `authorization: {credentials: TOKEN}`), or it gets 401 and nothing else.
// A request's head is at most 8 KiB and must arrive within 5 s; at most 16
// connections at once (more wait in the kernel's backlog). Not thread-safe;
// the raylet's loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "core/status.h"

namespace phalanx::scheduler {

// What the endpoint serves: the whole page, made at each request.
class MetricsSource {
 public:
  virtual ~MetricsSource() = default;
  virtual std::string RenderMetrics() = 0;
};

class MetricsExporter {
 public:
  // `token`: what a request from off loopback must present (the cluster token).
  MetricsExporter(boost::asio::io_context& io, MetricsSource* source, std::string token)
      : io_(io), source_(source), token_(std::move(token)), acceptor_(io) {}

  // Listens on host:port (port 0: any free one). Not OK when it cannot.
  Status Listen(const std::string& host, int port);
  void Stop();
  int port() const { return port_; }
  bool loopback() const { return loopback_; }

  static constexpr size_t kMaxHead = 8 * 1024;
  static constexpr int kMaxConnections = 16;
  static constexpr int kHeadTimeoutMs = 5000;

  // The response to a request whose head (request line and headers) is
  // `head`: status line, headers and body. `token` is required unless empty.
  static std::string Respond(const std::string& head, const std::string& token, MetricsSource* source);

 private:
  class Connection;
  void Accept();

  boost::asio::io_context& io_;
  MetricsSource* source_;
  std::string token_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  bool loopback_ = false;
  std::shared_ptr<int> open_ = std::make_shared<int>(0);  // connections being served
  bool stopped_ = false;
};

}  // namespace phalanx::scheduler
