// libFuzzer target: every message handler of a raylet, as an authenticated
// peer raylet and as a local client reach them. Each input is a sequence of
// frames, each `| u8 to_client | u8 type | u8 flags | u16 length | body |`,
// handed to a real Raylet (store, object table, task and actor managers,
// transfer, collectives; its GCS offline, as when redis-server is gone) one by
// one, the event loop run between them. Replies go to socket pairs that are
// drained. Checks: nothing crashes or aborts (CHECKs, sanitizers), and the
// raylet's memory stays within a constant of the input.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <boost/asio.hpp>
#include <google/protobuf/stubs/logging.h>

#include "core/frame.h"
#include "core/framed_connection.h"
#include "core/logging.h"
#include "scheduler/raylet.h"

using namespace phalanx;

namespace {

struct Pair {
  std::shared_ptr<FramedConnection> conn;
  int other = -1;
};

Pair MakePair(boost::asio::io_context& io) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  FramedConnection::Socket s(io);
  s.assign(boost::asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), fds[0]);
  return Pair{std::make_shared<FramedConnection>(std::move(s), "fuzzer"), fds[1]};
}

void Drain(int fd) {
  char buf[1 << 16];
  while (::read(fd, buf, sizeof(buf)) > 0) {
  }
}

std::string Dir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/phalanx-fuzz-XXXXXX";
    return std::string(::mkdtemp(tmpl));
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  SetMinLogLevel(LogLevel::kError);  // malformed input is logged as warnings: keep the run quiet
  google::protobuf::SetLogHandler(nullptr);  // (and protobuf's parse errors)
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::asio::io_context io(1);
  scheduler::RayletOptions o;
  o.socket_path = Dir() + "/raylet.sock";
  o.session_dir = Dir();
  o.cluster_token = "fuzz-token";
  o.worker_command = "";      // runs no workers: tasks fail at once, nothing is spawned
  o.prestart_workers = 0;
  o.store_capacity = 8 << 20;
  o.num_cpus = 2;
  o.num_gpus = 0;
  auto nm = scheduler::Raylet::CreateOffline(io, o);
  if (!nm.ok() || !nm.value()->Start().ok()) std::abort();
  Pair peer = MakePair(io), client = MakePair(io);
  size_t off = 0;
  while (off + 5 <= size) {
    bool to_client = data[off] & 1;
    FrameHeader h;
    h.type = data[off + 1];
    h.flags = data[off + 2] & 1;
    uint16_t len;
    std::memcpy(&len, data + off + 3, 2);
    off += 5;
    h.length = static_cast<uint32_t>(std::min<size_t>(len, size - off));
    h.request_id = off;
    if (ValidateHeader(h).ok()) {  // (the reader closes the connection on any other)
      const char* body = reinterpret_cast<const char*>(data + off);
      if (to_client) {
        nm.value()->HandleClientFrame(client.conn, h, body, h.length);
      } else {
        nm.value()->HandlePeerFrame(peer.conn, h, body, h.length);
      }
    }
    off += h.length;
    io.poll();
    Drain(peer.other);
    Drain(client.other);
  }
  nm.value()->Stop("fuzz input done");
  io.poll();
  nm.value().reset();
  ::close(peer.other);
  ::close(client.other);
  return 0;
}
