// libFuzzer target: what a peer reaches before it authenticates. The input
// is a byte stream cut into reads of varying sizes and fed to a FrameReader
// in handshake mode, whose frames go to the server side of the handshake
// (core/auth.h); after a successful handshake (never, without the token)
// the reader leaves handshake mode. With the first byte's high bit set, the
// stream goes through the server side of TLS first (core/tls.h, --tls), as
// on a TLS node's ports. Checks: nothing crashes, no frame beyond its type's
// limit is handed out, memory stays within a constant of the bytes fed, and
// no input authenticates (nor completes TLS: that needs the client's key).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/auth.h"
#include "core/frame_reader.h"
#include "core/tls.h"

using namespace phalanx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static std::shared_ptr<TlsContext> tls_ctx = TlsContext::Create("fuzz-token").value();
  size_t step = 1 + (data[0] & 0x3f);  // read sizes: the first byte picks them
  std::unique_ptr<TlsSession> tls;
  if (data[0] & 0x80) tls = std::make_unique<TlsSession>(tls_ctx, /*server=*/true, "fuzzer");
  data += 1;
  size -= 1;
  FrameReader reader(512);
  reader.set_handshake_only(true);
  Handshake hs(Handshake::Role::kServer, "fuzz-token", "fuzzer");
  size_t off = 0;
  while (off < size) {
    if (tls) {
      size_t n = std::min(step, size - off);
      tls->Feed(reinterpret_cast<const char*>(data + off), n);
      off += n;
      while (true) {
        auto space = reader.Space();
        if (!space.ok()) return 0;
        auto got = tls->Read(space.value().first, space.value().second);
        if (!got.ok()) return 0;  // the connection would close
        if (got.value() == 0) break;
        reader.Commit(got.value());
      }
      std::string out;
      tls->TakeOutput(&out);
      if (tls->established()) std::abort();  // TLS completed by bytes that hold no client key
    } else {
      auto space = reader.Space();
      if (!space.ok()) return 0;
      size_t n = std::min({space.value().second, step, size - off});
      std::memcpy(space.value().first, data + off, n);
      reader.Commit(n);
      off += n;
    }
    // Memory follows the bytes fed: at most about twice, plus the first buffer.
    if (reader.capacity() > 2 * (off + 64) + 4096) std::abort();
    while (true) {
      FrameHeader h;
      const char* body = nullptr;
      auto got = reader.Next(&h, &body);
      if (!got.ok()) return 0;  // malformed: the connection would close
      if (!got.value()) break;
      if (h.length > MaxFrameBody(h.type, h.flags)) std::abort();
      if (!hs.done()) {
        auto reply = hs.OnFrame(h, body, h.length);
        if (!reply.ok()) return 0;
        if (hs.done()) std::abort();  // authenticated without the token
      }
    }
  }
  return 0;
}
