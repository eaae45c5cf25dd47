// TLS for the connections that leave a machine (--tls): raylet to raylet,
// caller to actor worker over TCP, every process to redis-server (GCS).
//
// No PKI to run: every process of a cluster derives the same Ed25519 key
// from the cluster token (HMAC-SHA256(token, "phalanx-tls-key-1") as the
// seed) and presents a self-signed certificate for it. A client accepts a
// server only if the server's key is that key, i.e. the server holds the
// token; TLS 1.3's handshake proves the server holds the private key, so a
// man in the middle without the token cannot finish it. Clients prove the
// token with the phalanx handshake (core/auth.h) inside the channel, whose
// proofs are bound to the channel (TLS exporter), or with redis AUTH. Key
// exchange is ephemeral (ECDHE): traffic recorded today stays unreadable if
// the token leaks later. TLS 1.3 only, AES-128-GCM first (AES-NI).
//
// TlsSession is the protocol engine alone (memory BIOs, no I/O), so the Asio
// connections, the direct connections' poll thread, the blocking clients
// and the fuzzer drive the same code: feed it the bytes the socket gave,
// take plaintext out, put plaintext in, send what TakeOutput gives.
// Not thread-safe: one session per connection, one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct bio_st BIO;

namespace phalanx {

class TlsContext {
 public:
  // The cluster's TLS identity, derived from `token` (non-empty).
  static Result<std::shared_ptr<TlsContext>> Create(const std::string& token);
  ~TlsContext();

  // Writes the certificate and its key as PEM (redis-server's tls-cert-file
  // and tls-key-file); the key file is created 0600.
  Status WritePem(const std::string& cert_path, const std::string& key_path) const;

  SSL_CTX* client() const { return client_; }
  SSL_CTX* server() const { return server_; }
  // The raw Ed25519 public key every server of this cluster presents.
  const std::string& public_key() const { return public_key_; }

 private:
  TlsContext() = default;
  SSL_CTX* client_ = nullptr;
  SSL_CTX* server_ = nullptr;
  std::string cert_pem_;
  std::string key_pem_;
  std::string public_key_;
};

// Whether this process's cross-node connections use TLS: PHALANX_TLS=1
// (set by `phalanx start --tls`, the raylet's --tls, and inherited by the
// processes they start). The context for `token` if so, else null.
std::shared_ptr<TlsContext> TlsFromEnvironment(const std::string& token);

class TlsSession {
 public:
  TlsSession(std::shared_ptr<const TlsContext> ctx, bool server, std::string peer);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Bytes that arrived from the network.
  void Feed(const char* data, size_t n);
  // Up to `n` bytes of plaintext into `buf`: 0 when none is ready (feed
  // more). Runs the handshake first. Error: the peer failed the handshake
  // (wrong cluster, not TLS), sent a corrupt record, or closed the channel.
  Result<size_t> Read(char* buf, size_t n);
  // Advances the handshake without reading (a client calls it once to make
  // its first flight). Error as for Read.
  Status Advance();
  // Encrypts `n` bytes of plaintext. REQUIRES: established().
  Status Write(const char* data, size_t n);
  // Appends the bytes to send (handshake flights, records) to *out.
  void TakeOutput(std::string* out);
  bool has_output() const;
  // Network bytes fed and not yet decrypted, or plaintext not yet read.
  bool has_input() const;

  bool established() const { return established_; }
  // 32 bytes both ends share, unique to this channel (RFC 8446 exporter):
  // what the phalanx handshake binds its proofs to. REQUIRES: established().
  std::string ChannelBinding() const;

 private:
  Status Failed(const std::string& what);

  std::shared_ptr<const TlsContext> ctx_;
  bool server_;
  std::string peer_;
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;   // owned by ssl_
  BIO* out_ = nullptr;  // owned by ssl_
  bool established_ = false;
  bool first_byte_checked_ = false;
  bool not_tls_ = false;  // a server whose peer opened with something other than TLS
};

// A connected socket used blockingly, every call within a deadline, through
// a TLS channel once StartTls ran, else plain. For the connections made
// outside an event loop: the handshake's client side (core/auth.h) and the
// blocking redis connections.
class BlockingStream {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  // `fd`: connected, not owned. `peer` names the other end in errors.
  BlockingStream(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  // Runs the client side of the TLS handshake.
  Status StartTls(std::shared_ptr<const TlsContext> ctx, Deadline deadline);
  // Sends all of `bytes`.
  Status Write(const std::string& bytes, Deadline deadline);
  // At least 1 and at most `want` bytes of the stream; never reads past
  // them in plaintext mode (TLS keeps what it read in its channel).
  Result<size_t> Read(char* p, size_t want, Deadline deadline);
  // The channel (null without TLS), with whatever it holds unread.
  std::unique_ptr<TlsSession> ReleaseTls() { return std::move(tls_); }
  TlsSession* session() const { return tls_.get(); }
  // The peer closed the connection (a Read or StartTls failed for it).
  bool peer_closed() const { return peer_closed_; }

 private:
  Status Wait(short events, Deadline deadline);
  Status SendRaw(const char* p, size_t n, Deadline deadline);
  Status Flush(Deadline deadline);
  int fd_;
  std::string peer_;
  std::unique_ptr<TlsSession> tls_;
  bool peer_closed_ = false;
};

// Whether `data` starts like a TLS record (a handshake record, 0x16 0x03):
// for the error that says a node runs with --tls and its peer without.
bool LooksLikeTls(const char* data, size_t n);

}  // namespace phalanx
