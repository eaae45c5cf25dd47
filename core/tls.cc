#include "core/tls.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/auth.h"
#include "core/logging.h"
#include "core/process.h"

namespace phalanx {

namespace {
const char kKeyLabel[] = "phalanx-tls-key-1";
const char kExporterLabel[] = "EXPORTER-phalanx-auth-1";
// AES-128-GCM first: AES-NI makes it the cheapest per byte.
const char kSuites[] = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

std::string BioString(BIO* b) {
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  return std::string(data, n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::Create(const std::string& token) {
  if (token.empty()) return Status::InvalidArgument("TLS needs the cluster token");
  std::string seed = HmacSha256(token, kKeyLabel);
  std::shared_ptr<TlsContext> ctx(new TlsContext());
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr,
                                               reinterpret_cast<const unsigned char*>(seed.data()), seed.size());
  X509* cert = X509_new();
  auto cleanup = [&] {
    X509_free(cert);
    EVP_PKEY_free(key);
  };
  unsigned char raw[64];
  size_t raw_len = sizeof(raw);
  bool ok = key != nullptr && cert != nullptr && EVP_PKEY_get_raw_public_key(key, raw, &raw_len) == 1;
  if (ok) {
    ctx->public_key_.assign(reinterpret_cast<char*>(raw), raw_len);
    X509_NAME* name = X509_get_subject_name(cert);
    ok = X509_set_version(cert, 2) == 1 && ASN1_INTEGER_set(X509_get_serialNumber(cert), 1) == 1 &&
         // Fixed dates (RFC 5280's "no well-defined expiration" for the end) and a
         // deterministic signature (Ed25519): every process makes the same certificate.
         ASN1_TIME_set_string(X509_getm_notBefore(cert), "20200101000000Z") == 1 &&
         ASN1_TIME_set_string(X509_getm_notAfter(cert), "99991231235959Z") == 1 &&
         X509_set_pubkey(cert, key) == 1 &&
         X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                    reinterpret_cast<const unsigned char*>("phalanx cluster"), -1, -1, 0) == 1 &&
         X509_set_issuer_name(cert, name) == 1 && X509_sign(cert, key, nullptr) > 0;
  }
  if (ok) {
    BIO* c = BIO_new(BIO_s_mem());
    BIO* k = BIO_new(BIO_s_mem());
    ok = c && k && PEM_write_bio_X509(c, cert) == 1 &&
         PEM_write_bio_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    if (ok) {
      ctx->cert_pem_ = BioString(c);
      ctx->key_pem_ = BioString(k);
    }
    BIO_free(c);
    BIO_free(k);
  }
  if (ok) {
    ctx->server_ = SSL_CTX_new(TLS_server_method());
    ctx->client_ = SSL_CTX_new(TLS_client_method());
    for (SSL_CTX* c : {ctx->server_, ctx->client_}) {
      ok = ok && c != nullptr && SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) == 1 &&
           SSL_CTX_set_ciphersuites(c, kSuites) == 1;
      if (!ok) break;
      SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
      SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);  // an idle connection holds no record buffers
    }
    // The client checks the server's key itself once the handshake is done
    // (TlsSession::Advance): a self-signed certificate, pinned by its key.
    if (ok) SSL_CTX_set_verify(ctx->client_, SSL_VERIFY_NONE, nullptr);
    ok = ok && SSL_CTX_use_certificate(ctx->server_, cert) == 1 && SSL_CTX_use_PrivateKey(ctx->server_, key) == 1 &&
         SSL_CTX_set_num_tickets(ctx->server_, 0) == 1;  // nothing after the handshake that the client did not ask for
  }
  cleanup();
  if (!ok) return Status::Internal("cannot set up TLS: " + OpenSslErrors());
  return ctx;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(client_);
  SSL_CTX_free(server_);
}

Status TlsContext::WritePem(const std::string& cert_path, const std::string& key_path) const {
  PHALANX_RETURN_IF_ERROR(WriteFileWithMode(key_path, key_pem_, 0600));
  return WriteFileWithMode(cert_path, cert_pem_, 0644);
}

std::shared_ptr<TlsContext> TlsFromEnvironment(const std::string& token) {
  const char* env = std::getenv("PHALANX_TLS");
  if (env == nullptr || std::strcmp(env, "1") != 0 || token.empty()) return nullptr;
  static std::mutex mu;
  static std::string cached_token;
  static std::shared_ptr<TlsContext> cached;
  std::lock_guard<std::mutex> l(mu);
  if (cached && cached_token == token) return cached;
  auto ctx = TlsContext::Create(token);
  // Asked for TLS and cannot have it: never fall back to plaintext.
  PHALANX_CHECK(ctx.ok()) << ctx.status().message();
  cached_token = token;
  cached = ctx.value();
  return cached;
}

bool LooksLikeTls(const char* data, size_t n) {
  return n >= 1 && static_cast<unsigned char>(data[0]) == 0x16 &&
         (n < 2 || static_cast<unsigned char>(data[1]) == 0x03);
}

TlsSession::TlsSession(std::shared_ptr<const TlsContext> ctx, bool server, std::string peer)
    : ctx_(std::move(ctx)), server_(server), peer_(std::move(peer)) {
  ssl_ = SSL_new(server_ ? ctx_->server() : ctx_->client());
  PHALANX_CHECK(ssl_ != nullptr) << "SSL_new failed: " << OpenSslErrors();
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  PHALANX_CHECK(in_ && out_) << "out of memory for TLS buffers";
  BIO_set_mem_eof_return(in_, -1);  // an empty input means "wait for more", not EOF
  SSL_set_bio(ssl_, in_, out_);
  if (server_) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
  }
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

Status TlsSession::Failed(const std::string& what) {
  std::string detail = OpenSslErrors();
  return Status::Unavailable(peer_ + ": " + what + " (" + detail + ")");
}

void TlsSession::Feed(const char* data, size_t n) {
  if (n == 0) return;
  if (server_ && !first_byte_checked_) {
    first_byte_checked_ = true;
    not_tls_ = !LooksLikeTls(data, n);
  }
  BIO_write(in_, data, static_cast<int>(n));
}

Status TlsSession::Advance() {
  if (established_) return Status::OK();
  if (not_tls_) {
    return Status::Unavailable(peer_ + " did not start TLS: this node runs with --tls (PHALANX_TLS=1), the peer "
                               "without; every node of a cluster must use the same setting");
  }
  ERR_clear_error();
  int r = SSL_do_handshake(ssl_);
  if (r != 1) {
    int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Status::OK();
    return Failed(server_ ? "TLS handshake failed" : "TLS handshake failed (does the peer run with --tls?)");
  }
  if (!server_) {
    X509* cert = SSL_get0_peer_certificate(ssl_);
    EVP_PKEY* key = cert ? X509_get0_pubkey(cert) : nullptr;
    unsigned char raw[64];
    size_t len = sizeof(raw);
    if (key == nullptr || EVP_PKEY_get_raw_public_key(key, raw, &len) != 1 ||
        std::string(reinterpret_cast<char*>(raw), len) != ctx_->public_key()) {
      ERR_clear_error();
      return Status::Unavailable(peer_ + " presented a TLS key that is not this cluster's: it does not hold the "
                                 "cluster token (another cluster, a different PHALANX_CLUSTER_TOKEN, or someone in "
                                 "the middle)");
    }
  }
  established_ = true;
  return Status::OK();
}

Result<size_t> TlsSession::Read(char* buf, size_t n) {
  if (!established_) {
    PHALANX_RETURN_IF_ERROR(Advance());
    if (!established_) return size_t{0};
  }
  ERR_clear_error();
  int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, 1 << 30)));
  if (r > 0) return static_cast<size_t>(r);
  int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return size_t{0};
  if (e == SSL_ERROR_ZERO_RETURN) return Status::Unavailable(peer_ + " closed the TLS channel");
  return Failed("corrupt or forged TLS record");
}

Status TlsSession::Write(const char* data, size_t n) {
  PHALANX_CHECK(established_) << "TLS write before the handshake";
  ERR_clear_error();
  while (n > 0) {
    int chunk = static_cast<int>(std::min<size_t>(n, 1 << 30));
    int r = SSL_write(ssl_, data, chunk);
    if (r <= 0) return Failed("TLS write failed");
    data += r;
    n -= static_cast<size_t>(r);
  }
  return Status::OK();
}

void TlsSession::TakeOutput(std::string* out) {
  size_t pending = BIO_ctrl_pending(out_);
  if (pending == 0) return;
  size_t at = out->size();
  out->resize(at + pending);
  int got = BIO_read(out_, out->data() + at, static_cast<int>(pending));
  out->resize(at + (got > 0 ? static_cast<size_t>(got) : 0));
}

bool TlsSession::has_output() const { return BIO_ctrl_pending(out_) > 0; }

bool TlsSession::has_input() const { return BIO_ctrl_pending(in_) > 0 || SSL_pending(ssl_) > 0; }

std::string TlsSession::ChannelBinding() const {
  PHALANX_CHECK(established_) << "channel binding before the TLS handshake";
  unsigned char out[32];
  PHALANX_CHECK(SSL_export_keying_material(ssl_, out, sizeof(out), kExporterLabel, std::strlen(kExporterLabel),
                                           nullptr, 0, 0) == 1)
      << "TLS exporter failed";
  return std::string(reinterpret_cast<char*>(out), sizeof(out));
}

Status BlockingStream::Wait(short events, Deadline deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::TimedOut(peer_ + " did not answer in time");
    pollfd p{fd_, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) return Status::OK();
    if (r < 0 && errno != EINTR) return Status::Unavailable(peer_ + ": poll failed: " + std::strerror(errno));
  }
}

Status BlockingStream::SendRaw(const char* p, size_t n, Deadline deadline) {
  size_t off = 0;
  while (off < n) {
    ssize_t w = ::send(fd_, p + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      PHALANX_RETURN_IF_ERROR(Wait(POLLOUT, deadline));
      continue;
    }
    if (w < 0) return Status::Unavailable(peer_ + ": write failed: " + std::strerror(errno));
    off += static_cast<size_t>(w);
  }
  return Status::OK();
}

Status BlockingStream::Flush(Deadline deadline) {
  std::string out;
  tls_->TakeOutput(&out);
  return SendRaw(out.data(), out.size(), deadline);
}

Status BlockingStream::StartTls(std::shared_ptr<const TlsContext> ctx, Deadline deadline) {
  tls_ = std::make_unique<TlsSession>(std::move(ctx), /*server=*/false, peer_);
  while (true) {
    PHALANX_RETURN_IF_ERROR(tls_->Advance());
    PHALANX_RETURN_IF_ERROR(Flush(deadline));
    if (tls_->established()) return Status::OK();
    PHALANX_RETURN_IF_ERROR(Wait(POLLIN, deadline));
    char raw[16 << 10];
    ssize_t n = ::recv(fd_, raw, sizeof(raw), MSG_DONTWAIT);
    if (n == 0) {
      peer_closed_ = true;
      return Status::Unavailable(peer_ + " closed the connection during the TLS handshake (does it run without "
                                 "--tls?)");
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return Status::Unavailable(peer_ + ": TLS handshake read failed: " + std::strerror(errno));
    }
    if (n > 0) tls_->Feed(raw, static_cast<size_t>(n));
  }
}

Status BlockingStream::Write(const std::string& bytes, Deadline deadline) {
  if (!tls_) return SendRaw(bytes.data(), bytes.size(), deadline);
  PHALANX_RETURN_IF_ERROR(tls_->Write(bytes.data(), bytes.size()));
  return Flush(deadline);
}

Result<size_t> BlockingStream::Read(char* p, size_t want, Deadline deadline) {
  while (true) {
    if (tls_) {
      PHALANX_ASSIGN_OR_RETURN(size_t n, tls_->Read(p, want));
      if (tls_->has_output()) PHALANX_RETURN_IF_ERROR(Flush(deadline));
      if (n > 0) return n;
    }
    PHALANX_RETURN_IF_ERROR(Wait(POLLIN, deadline));
    char raw[16 << 10];
    ssize_t n = tls_ ? ::recv(fd_, raw, sizeof(raw), MSG_DONTWAIT) : ::recv(fd_, p, want, MSG_DONTWAIT);
    if (n == 0) {
      peer_closed_ = true;
      return Status::Unavailable(peer_ + " closed the connection");
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Status::Unavailable(peer_ + ": read failed: " + std::strerror(errno));
    }
    if (!tls_) return static_cast<size_t>(n);
    tls_->Feed(raw, static_cast<size_t>(n));
  }
}

}  // namespace phalanx
