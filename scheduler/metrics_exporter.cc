#include "scheduler/metrics_exporter.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cctype>

#include "core/logging.h"
#include "core/process.h"

namespace phalanx::scheduler {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

std::string Response(int code, const char* reason, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// The value of header `name` (case-insensitive) in `head`, or "" when absent.
std::string Header(const std::string& head, const std::string& name) {
  size_t at = head.find("\r\n");
  while (at != std::string::npos && at + 2 < head.size()) {
    size_t start = at + 2, end = head.find("\r\n", start);
    if (end == std::string::npos) end = head.size();
    std::string line = head.substr(start, end - start);
    size_t colon = line.find(':');
    if (colon != std::string::npos && colon == name.size() &&
        std::equal(name.begin(), name.end(), line.begin(),
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b)); })) {
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      v.erase(v.find_last_not_of(" \t") + 1);
      return v;
    }
    at = end;
  }
  return "";
}

// Whether `head` (what has come so far) can be the start of an HTTP request: a method of capital letters, then a space.
bool LooksLikeHttp(const std::string& head) {
  for (size_t i = 0; i < head.size() && i < 8; ++i) {
    if (head[i] == ' ') return i > 0;
    if (head[i] < 'A' || head[i] > 'Z') return false;
  }
  return head.size() < 8;
}

}  // namespace

std::string MetricsExporter::Respond(const std::string& head, const std::string& token, MetricsSource* source) {
  size_t line_end = head.find("\r\n");
  std::string line = head.substr(0, line_end);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1 || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    return Response(400, "Bad Request", "text/plain", "phalanx metrics: not an HTTP request\n");
  }
  std::string method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (!token.empty()) {
    std::string auth = Header(head, "Authorization");
    std::string given = auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : "";
    if (given.size() != token.size() || CRYPTO_memcmp(given.data(), token.data(), token.size()) != 0) {
      return Response(401, "Unauthorized", "text/plain",
                      "phalanx metrics: this address needs the cluster token: send Authorization: Bearer TOKEN\n");
    }
  }
  if (method != "GET" && method != "HEAD") {
    return Response(405, "Method Not Allowed", "text/plain", "phalanx metrics: GET /metrics\n");
  }
  std::string path = target.substr(0, target.find('?'));
  if (path != "/metrics" && path != "/") {
    return Response(404, "Not Found", "text/plain", "phalanx metrics: GET /metrics\n");
  }
  std::string body = source->RenderMetrics();
  std::string r = Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
  if (method == "HEAD") r.resize(r.size() - body.size());
  return r;
}

// One request: reads its head (within kMaxHead bytes and kHeadTimeoutMs), answers, closes.
class MetricsExporter::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(MetricsExporter* owner, tcp::socket socket)
      : owner_(owner), open_(owner->open_), socket_(std::move(socket)), timer_(owner->io_) {
    ++*open_;
  }
  ~Connection() { --*open_; }

  void Start() {
    timer_.expires_after(std::chrono::milliseconds(kHeadTimeoutMs));
    timer_.async_wait([self = shared_from_this()](auto ec) {
      if (!ec) self->Close();
    });
    Read();
  }

 private:
  void Read() {
    socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](auto ec, size_t n) {
      if (ec) return self->Close();
      self->head_.append(self->chunk_, n);
      if (!LooksLikeHttp(self->head_)) {  // (another protocol's bytes: refused now, not at the head's timeout)
        return self->Write(Response(400, "Bad Request", "text/plain", "phalanx metrics: not an HTTP request\n"));
      }
      size_t end = self->head_.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (self->head_.size() > kMaxHead) {
          return self->Write(Response(431, "Request Header Fields Too Large", "text/plain", "phalanx metrics: head over 8 KiB\n"));
        }
        return self->Read();
      }
      if (end > kMaxHead) {
        return self->Write(Response(431, "Request Header Fields Too Large", "text/plain", "phalanx metrics: head over 8 KiB\n"));
      }
      self->Write(Respond(self->head_.substr(0, end + 2), self->owner_->token_, self->owner_->source_));
    });
  }

  void Write(std::string response) {
    timer_.cancel();
    out_ = std::move(response);
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto, size_t) { self->Close(); });
  }

  void Close() {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  MetricsExporter* owner_;  // (read only before the response is written; the count outlives it)
  std::shared_ptr<int> open_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  char chunk_[2048];
  std::string head_;
  std::string out_;
};

Status MetricsExporter::Listen(const std::string& host, int port) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) return Status::InvalidArgument("metrics endpoint: cannot read address " + host + ": " + ec.message());
  loopback_ = address.is_loopback();
  if (loopback_) token_.clear();  // (anyone on this machine may read it, as Prometheus's node exporter)
  tcp::endpoint ep(address, static_cast<unsigned short>(port));
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(64, ec);
  if (ec) return Status::Unavailable("metrics endpoint: cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  SetCloseOnExec(acceptor_.native_handle());  // (workers the raylet starts must not hold it)
  port_ = acceptor_.local_endpoint().port();
  Accept();
  return Status::OK();
}

void MetricsExporter::Accept() {
  if (stopped_) return;
  if (*open_ >= kMaxConnections) {  // at the limit: the next waits (in the backlog) for one to close
    auto retry = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(50));
    retry->async_wait([this, retry](auto ec) {
      if (!ec) Accept();
    });
    return;
  }
  acceptor_.async_accept([this](auto ec, tcp::socket socket) {
    if (stopped_ || ec == asio::error::operation_aborted) return;
    if (!ec) {
      // A worker started while this is open must not hold it: the scraper would wait for its close.
      SetCloseOnExec(socket.native_handle());
      std::make_shared<Connection>(this, std::move(socket))->Start();
    }
    Accept();
  });
}

void MetricsExporter::Stop() {
  stopped_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

}  // namespace phalanx::scheduler
