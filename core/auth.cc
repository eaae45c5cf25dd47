#include "core/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/frame_reader.h"
#include "core/logging.h"
#include "core/proto/phalanx.pb.h"
#include "core/tls.h"

namespace phalanx {

namespace {
const char kServerLabel[] = "phalanx-auth-1 server";
const char kClientLabel[] = "phalanx-auth-1 client";

bool SameBytes(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string Proof(const std::string& token, const char* label, const std::string& first, const std::string& second,
                  const std::string& binding) {
  return HmacSha256(token, std::string(label) + first + second + binding);
}
}  // namespace

std::string HmacSha256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  PHALANX_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                     reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len) != nullptr)
      << "HMAC-SHA256 failed";
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string SecureRandomBytes(size_t n) {
  std::string out(n, '\0');
  PHALANX_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) == 1)
      << "the system's random source failed";
  return out;
}

Handshake::Handshake(Role role, std::string token, std::string peer)
    : role_(role), token_(std::move(token)), peer_(std::move(peer)) {
  PHALANX_CHECK(!token_.empty()) << "a handshake needs the cluster token";
}

Status Handshake::Fail(const std::string& why) {
  state_ = State::kFailed;
  return Status::Unavailable(peer_ + ": " + why);
}

std::string Handshake::Begin() {
  if (role_ == Role::kServer) return "";
  client_nonce_ = SecureRandomBytes(kAuthNonceBytes);
  rpc::AuthHello hello;
  hello.set_version(kAuthVersion);
  hello.set_nonce(client_nonce_);
  state_ = State::kHelloSent;
  return EncodeFrame(rpc::AUTH_HELLO, 0, 0, hello);
}

Result<std::string> Handshake::OnFrame(const FrameHeader& h, const char* body, size_t len) {
  if (state_ == State::kDone || state_ == State::kFailed) return Fail("handshake frame after the handshake ended");
  if (h.flags != 0 || len > kHandshakeBody) return Fail("malformed handshake frame");
  if (role_ == Role::kServer && state_ == State::kStart) {
    rpc::AuthHello hello;
    if (h.type != rpc::AUTH_HELLO || !hello.ParseFromArray(body, static_cast<int>(len))) {
      return Fail("did not open with the authentication handshake");
    }
    if (hello.version() != kAuthVersion) {
      return Fail("speaks handshake version " + std::to_string(hello.version()) + ", this process " +
                  std::to_string(kAuthVersion) + " (a different phalanx release?)");
    }
    if (hello.nonce().size() != kAuthNonceBytes) return Fail("sent a malformed handshake");
    client_nonce_ = hello.nonce();
    server_nonce_ = SecureRandomBytes(kAuthNonceBytes);
    rpc::AuthChallenge c;
    c.set_nonce(server_nonce_);
    c.set_proof(Proof(token_, kServerLabel, client_nonce_, server_nonce_, binding_));
    state_ = State::kChallengeSent;
    return EncodeFrame(rpc::AUTH_CHALLENGE, 0, 0, c);
  }
  if (role_ == Role::kServer && state_ == State::kChallengeSent) {
    rpc::AuthProof p;
    if (h.type != rpc::AUTH_PROOF || !p.ParseFromArray(body, static_cast<int>(len))) {
      return Fail("sent a malformed handshake");
    }
    if (!SameBytes(p.proof(), Proof(token_, kClientLabel, server_nonce_, client_nonce_, binding_))) {
      return Fail("does not hold this cluster's token");
    }
    state_ = State::kDone;
    return std::string();
  }
  if (role_ == Role::kClient && state_ == State::kHelloSent) {
    rpc::AuthChallenge c;
    if (h.type != rpc::AUTH_CHALLENGE || !c.ParseFromArray(body, static_cast<int>(len)) ||
        c.nonce().size() != kAuthNonceBytes) {
      return Fail("answered the handshake with something else");
    }
    if (!SameBytes(c.proof(), Proof(token_, kServerLabel, client_nonce_, c.nonce(), binding_))) {
      return Fail("does not hold this cluster's token (another cluster, or a different PHALANX_CLUSTER_TOKEN)");
    }
    server_nonce_ = c.nonce();
    rpc::AuthProof p;
    p.set_proof(Proof(token_, kClientLabel, server_nonce_, client_nonce_, binding_));
    state_ = State::kDone;
    return EncodeFrame(rpc::AUTH_PROOF, 0, 0, p);
  }
  return Fail("sent a handshake frame out of order");
}

Status ClientHandshake(int fd, const std::string& token, const std::string& peer, int64_t timeout_ms,
                       const std::shared_ptr<const TlsContext>& tls, std::unique_ptr<TlsSession>* session) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  BlockingStream stream(fd, peer);
  Handshake hs(Handshake::Role::kClient, token, peer);
  auto run = [&]() -> Status {
    if (tls) {
      PHALANX_RETURN_IF_ERROR(stream.StartTls(tls, deadline));
      hs.set_channel_binding(stream.session()->ChannelBinding());
    }
    PHALANX_RETURN_IF_ERROR(stream.Write(hs.Begin(), deadline));
    FrameReader reader(kHandshakeBody + kFrameHeaderSize);
    reader.set_handshake_only(true);
    while (!hs.done()) {
      PHALANX_ASSIGN_OR_RETURN(auto space, reader.Space());
      // Only the handshake's bytes: what follows it belongs to the connection's reader.
      size_t want = std::min(space.second, kFrameHeaderSize);
      if (reader.buffered() >= kFrameHeaderSize) {
        FrameHeader h = DecodeHeader(space.first - reader.buffered());
        want = std::min(space.second, kFrameHeaderSize + h.length - reader.buffered());
      }
      PHALANX_ASSIGN_OR_RETURN(size_t n, stream.Read(space.first, want, deadline));
      reader.Commit(n);
      FrameHeader h;
      const char* body = nullptr;
      PHALANX_ASSIGN_OR_RETURN(bool got, reader.Next(&h, &body));
      if (!got) continue;
      PHALANX_ASSIGN_OR_RETURN(std::string reply, hs.OnFrame(h, body, h.length));
      if (!reply.empty()) PHALANX_RETURN_IF_ERROR(stream.Write(reply, deadline));
    }
    return Status::OK();
  };
  Status st = run();
  if (st.code() == StatusCode::kTimedOut) {
    return Status::TimedOut(peer + " did not complete the handshake within " + std::to_string(timeout_ms) + " ms");
  }
  if (!st.ok() && stream.peer_closed()) {
    return Status::Unavailable(st.message() + " during the handshake (wrong cluster token" +
                               (tls ? ", or it runs without --tls?)" : ", or it runs with --tls?)"));
  }
  PHALANX_RETURN_IF_ERROR(st);
  if (session) *session = stream.ReleaseTls();
  return Status::OK();
}

void LogRefusedPeer(const std::string& address, const std::string& why) {
  static std::mutex mu;
  static std::unordered_map<std::string, uint64_t> refused;
  uint64_t n;
  {
    std::lock_guard<std::mutex> l(mu);
    if (refused.size() > 4096) refused.clear();  // bounded, whatever the peers
    n = ++refused[address];
  }
  bool power_of_ten = false;
  for (uint64_t p = 1; p <= n; p *= 10) power_of_ten = power_of_ten || p == n;
  if (!power_of_ten) return;
  PHALANX_LOG(Warning) << "refused a connection from " << address << ": " << why
                       << (n > 1 ? " (" + std::to_string(n) + " refused from there so far)" : "");
}

}  // namespace phalanx
