// The handshake that opens every connection between processes that are not
// parent and child: raylet to raylet (TCP), caller to actor worker (TCP and
// Unix). Both ends prove that they hold the cluster token without sending it:
//
//   client -> server  AUTH_HELLO      version, client nonce Nc (32 random bytes)
//   server -> client  AUTH_CHALLENGE  server nonce Ns, HMAC-SHA256(token, "phalanx-auth-1 server" | Nc | Ns)
//   client -> server  AUTH_PROOF      HMAC-SHA256(token, "phalanx-auth-1 client" | Ns | Nc)
//
// The client checks the server's proof before it sends anything else, the
// server reads nothing else before the client's proof checks out: mutual,
// and a recorded handshake cannot be replayed (the other side's nonce is new
// each time). Proofs are compared in constant time. Under TLS (--tls,
// core/tls.h) the proofs also cover the channel's exporter; without it, what
// follows the handshake is not encrypted or protected from a man in the
// middle (docs/security.md).
//
// Handshake is the state machine alone (no I/O), so the Asio connections, the
// direct connections' poll thread and the fuzzer drive the same code.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/frame.h"
#include "core/status.h"

namespace phalanx {

inline constexpr uint32_t kAuthVersion = 1;
inline constexpr size_t kAuthNonceBytes = 32;
// How long a new connection may take to authenticate before it is closed.
inline constexpr int64_t kAuthTimeoutMs = 5000;

class Handshake {
 public:
  enum class Role { kClient, kServer };
  // REQUIRES: token non-empty. `peer` names the other end in errors.
  Handshake(Role role, std::string token, std::string peer);

  // The first frame to send (the client's AUTH_HELLO), or "" (a server waits).
  std::string Begin();
  // One handshake frame from the peer. Returns the frame to send back ("" if
  // none); once done(), the connection is authenticated. An error means the
  // peer failed to authenticate (or is not of this cluster): close the
  // connection. After an error or done(), REQUIRES: not called again.
  Result<std::string> OnFrame(const FrameHeader& h, const char* body, size_t len);
  bool done() const { return state_ == State::kDone; }
  // Binds both proofs to the channel they cross (a TLS channel's exporter,
  // core/tls.h): a proof made for one channel fails on any other, so a man
  // in the middle cannot relay the handshake. REQUIRES: before Begin/OnFrame.
  void set_channel_binding(std::string binding) { binding_ = std::move(binding); }

 private:
  enum class State { kStart, kHelloSent, kChallengeSent, kDone, kFailed };
  Status Fail(const std::string& why);

  Role role_;
  std::string token_;
  std::string peer_;
  State state_ = State::kStart;
  std::string client_nonce_;
  std::string server_nonce_;
  std::string binding_;  // empty without TLS
};

// HMAC-SHA256(key, data): 32 bytes.
std::string HmacSha256(const std::string& key, const std::string& data);
// `n` bytes from the system's random source (OpenSSL's RAND_bytes).
std::string SecureRandomBytes(size_t n);

class TlsContext;
class TlsSession;

// Runs the client side on a connected blocking-or-not socket `fd` until done,
// within `timeout_ms`. For connections made outside an event loop. With
// `tls` (non-null), TLS first and the handshake inside it; *session then
// holds the channel (with any bytes that arrived past the handshake), for
// the connection to go on with.
Status ClientHandshake(int fd, const std::string& token, const std::string& peer, int64_t timeout_ms,
                       const std::shared_ptr<const TlsContext>& tls = nullptr,
                       std::unique_ptr<TlsSession>* session = nullptr);

// Logs a refused peer: the first refusal from an address in full, later ones
// from it at 1, 10, 100, ... (so a flood cannot fill the log).
void LogRefusedPeer(const std::string& address, const std::string& why);

}  // namespace phalanx
