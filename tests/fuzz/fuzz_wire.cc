// libFuzzer target: what a peer reaches before it authenticates. The input
// is a byte stream cut into reads of varying sizes and fed to a FrameReader
// in handshake mode, whose frames go to the server side of the handshake
// (core/auth.h); after a successful handshake (never, without the token)
// the reader leaves handshake mode. Checks: nothing crashes, no frame beyond
// its type's limit is handed out, memory stays within a constant of the
// bytes fed, and no input authenticates.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/auth.h"
#include "core/frame_reader.h"

using namespace phalanx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t step = 1 + data[0] % 64;  // read sizes: the first byte picks them
  data += 1;
  size -= 1;
  FrameReader reader(512);
  reader.set_handshake_only(true);
  Handshake hs(Handshake::Role::kServer, "fuzz-token", "fuzzer");
  size_t off = 0;
  while (off < size) {
    auto space = reader.Space();
    if (!space.ok()) return 0;
    size_t n = std::min({space.value().second, step, size - off});
    std::memcpy(space.value().first, data + off, n);
    reader.Commit(n);
    off += n;
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
