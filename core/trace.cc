#include "core/trace.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "core/ids.h"
#include "core/logging.h"

namespace phalanx::trace {
namespace {

constexpr char kMagic[8] = {'P', 'H', 'X', 'T', 'R', 'A', 'C', 'E'};
constexpr uint64_t kDefaultCapacity = 16384;
constexpr uint64_t kMaxCapacity = 1 << 22;  // 512 MiB of records: more is a mistake

std::mutex g_mu;                    // guards opening and closing
std::atomic<Ring*> g_ring{nullptr};
std::unique_ptr<Ring> g_owned;      // what g_ring points at (closed rings are kept: a writer may hold the pointer)
std::vector<std::unique_ptr<Ring>> g_closed;

uint32_t ThreadId() {
  thread_local uint32_t tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return tid;
}

void CopyPadded(char* dst, size_t cap, const std::string& src) {
  size_t n = std::min(cap, src.size());
  std::memcpy(dst, src.data(), n);
  if (n < cap) std::memset(dst + n, 0, cap - n);
}

std::string Trimmed(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

// The rings' folder is this user's alone: a directory (not a link), owned by
// this user, closed to everyone else. In /dev/shm anyone may make a folder of
// that name first; then it is not used (its files could be swapped or cut
// short under a reader).
Status CheckOwnDir(const std::string& dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return Status::NotFound(dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return Status::InvalidArgument(dir + " is not a folder of this user's closed to others: not used");
  }
  return Status::OK();
}

}  // namespace

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

Ring::Ring(std::string path, void* base, size_t bytes)
    : path_(std::move(path)),
      base_(base),
      bytes_(bytes),
      header_(static_cast<Header*>(base)),
      records_(reinterpret_cast<Record*>(static_cast<char*>(base) + sizeof(Header))) {}

Ring::~Ring() { ::munmap(base_, bytes_); }

Result<std::unique_ptr<Ring>> Ring::Create(const std::string& path, uint64_t capacity, const std::string& node_id,
                                           const std::string& label) {
  if (capacity == 0 || capacity > kMaxCapacity) {
    return Status::InvalidArgument("a trace ring holds 1 to " + std::to_string(kMaxCapacity) + " records");
  }
  size_t bytes = sizeof(Header) + capacity * sizeof(Record);
  std::string tmp = path + ".new";
  ::unlink(tmp.c_str());  // (a stale one of an earlier process with this pid)
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Unavailable("cannot create " + tmp + ": " + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::Unavailable("cannot size " + tmp + ": " + std::strerror(err));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    ::unlink(tmp.c_str());
    return Status::Unavailable("cannot map " + tmp + ": " + std::strerror(errno));
  }
  auto* h = static_cast<Header*>(base);
  std::memcpy(h->magic, kMagic, sizeof(kMagic));
  h->version = 1;
  h->record_size = sizeof(Record);
  h->capacity = capacity;
  h->next.store(0, std::memory_order_relaxed);
  h->pid = static_cast<int32_t>(::getpid());
  CopyPadded(h->node, sizeof(h->node), node_id);
  CopyPadded(h->label, sizeof(h->label), label);
  h->start_ns = NowNs();
  // (the file is whole before its name appears: a reader never sees half a header)
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::munmap(base, bytes);
    ::unlink(tmp.c_str());
    return Status::Unavailable("cannot name " + path + ": " + std::strerror(err));
  }
  return std::unique_ptr<Ring>(new Ring(path, base, bytes));
}

namespace {
// Every field of `r` but seq (the caller publishes it).
void Fill(Record& r, Kind kind, uint64_t ts_ns, uint64_t dur_ns, const std::string& id, const std::string& name,
          uint64_t a, uint64_t b, const std::string& peer, uint16_t flags) {
  r.ts_ns = ts_ns;
  r.dur_ns = dur_ns;
  r.a = a;
  r.b = b;
  r.kind = kind;
  r.flags = flags;
  r.tid = ThreadId();
  CopyPadded(r.id, sizeof(r.id), id);
  CopyPadded(r.peer, sizeof(r.peer), peer);
  if (name.size() <= sizeof(r.name)) {
    CopyPadded(r.name, sizeof(r.name), name);
  } else {  // a long name keeps its end ("module.Class.method": the method is what a reader looks for)
    r.name[0] = r.name[1] = '.';
    std::memcpy(r.name + 2, name.data() + name.size() - (sizeof(r.name) - 2), sizeof(r.name) - 2);
  }
}
}  // namespace

void Ring::Emit(Kind kind, uint64_t ts_ns, uint64_t dur_ns, const std::string& id, const std::string& name,
                uint64_t a, uint64_t b, const std::string& peer, uint16_t flags) {
  uint64_t pos = header_->next.fetch_add(1, std::memory_order_relaxed);
  Record& r = records_[pos % header_->capacity];
  r.seq.store(0, std::memory_order_relaxed);  // (being written: a reader skips it)
  std::atomic_thread_fence(std::memory_order_release);
  Fill(r, kind, ts_ns, dur_ns, id, name, a, b, peer, flags);
  r.seq.store(pos + 1, std::memory_order_release);
}

void AppendRecord(std::string* out, Kind kind, uint64_t ts_ns, uint64_t dur_ns, const std::string& id,
                  const std::string& name, uint64_t a, uint64_t b, const std::string& peer, uint16_t flags) {
  Record r{};
  Fill(r, kind, ts_ns, dur_ns, id, name, a, b, peer, flags);
  r.seq.store(1, std::memory_order_relaxed);
  out->append(reinterpret_cast<const char*>(&r), sizeof(r));
}

std::string TraceDir(const std::string& session_dir) {
  std::string base = session_dir;
  while (!base.empty() && base.back() == '/') base.pop_back();
  base = base.substr(base.rfind('/') + 1);
  const char* env = std::getenv("PHALANX_TRACE_DIR");
  if (env != nullptr && *env != '\0') return std::string(env) + "/phalanx-" + base + "-trace";
  struct stat st;
  if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0) {
    return "/dev/shm/phalanx-" + base + "-trace";
  }
  return session_dir + "/trace";
}

void OpenProcessRing(const std::string& session_dir, const std::string& node_id, const std::string& label,
                     uint64_t capacity) {
  // PHALANX_TRACE: unset or 1, every process; 0, none; else a comma-separated
  // list of the labels that trace ("raylet", "worker").
  const char* env = std::getenv("PHALANX_TRACE");
  if (env != nullptr && *env != '\0' && std::string(env) != "1") {
    std::string list = "," + std::string(env) + ",";
    if (list.find("," + label + ",") == std::string::npos) return;
  }
  std::lock_guard<std::mutex> l(g_mu);
  if (g_owned || session_dir.empty()) return;
  std::string dir = TraceDir(session_dir);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    PHALANX_LOG(Warning) << "no timeline events from this process: cannot make " << dir << ": " << std::strerror(errno);
    return;
  }
  if (Status own = CheckOwnDir(dir); !own.ok()) {
    PHALANX_LOG(Warning) << "no timeline events from this process: " << own.message();
    return;
  }
  std::string path = dir + "/" + ToHex(node_id).substr(0, 12) + "-" + std::to_string(::getpid()) + ".ring";
  auto ring = Ring::Create(path, capacity == 0 ? kDefaultCapacity : capacity, node_id, label);
  if (!ring.ok()) {
    PHALANX_LOG(Warning) << "no timeline events from this process: " << ring.status().message();
    return;
  }
  g_owned = std::move(ring).value();
  g_ring.store(g_owned.get(), std::memory_order_release);
}

void CloseProcessRing() {
  std::lock_guard<std::mutex> l(g_mu);
  g_ring.store(nullptr, std::memory_order_release);
  if (g_owned) g_closed.push_back(std::move(g_owned));  // (a thread may still be writing into it)
}

Ring* ProcessRing() { return g_ring.load(std::memory_order_acquire); }

Result<RingDump> ReadRing(const std::string& path, uint64_t since_ns) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::Unavailable("cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Header)) {
    ::close(fd);
    return Status::InvalidArgument(path + " is not a trace ring (too short)");
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return Status::Unavailable("cannot map " + path + ": " + std::strerror(errno));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { ::munmap(p, n); }
  } unmap{base, bytes};
  const auto* h = static_cast<const Header*>(base);
  if (std::memcmp(h->magic, kMagic, sizeof(kMagic)) != 0 || h->version != 1 || h->record_size != sizeof(Record) ||
      h->capacity == 0 || sizeof(Header) + h->capacity * sizeof(Record) > bytes) {
    return Status::InvalidArgument(path + " is not a trace ring of this version");
  }
  RingDump out;
  out.path = path;
  out.pid = h->pid;
  out.node = std::string(h->node, sizeof(h->node));
  out.label = Trimmed(h->label, sizeof(h->label));
  out.start_ns = h->start_ns;
  uint64_t next = h->next.load(std::memory_order_acquire);
  out.written = next;
  out.capacity = h->capacity;
  uint64_t first = next > h->capacity ? next - h->capacity : 0;
  const auto* records = reinterpret_cast<const Record*>(static_cast<const char*>(base) + sizeof(Header));
  out.records.reserve((next - first) * sizeof(Record));
  Record copy;
  for (uint64_t pos = first; pos < next; ++pos) {
    const Record& r = records[pos % h->capacity];
    uint64_t seq = r.seq.load(std::memory_order_acquire);
    if (seq != pos + 1) continue;  // being written, or overwritten already
    std::memcpy(static_cast<void*>(&copy), static_cast<const void*>(&r), sizeof(Record));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (r.seq.load(std::memory_order_relaxed) != seq) continue;  // overwritten while copied
    if (copy.ts_ns + copy.dur_ns < since_ns) continue;
    out.records.append(reinterpret_cast<const char*>(&copy), sizeof(Record));
  }
  return out;
}

std::vector<std::string> RingFiles(const std::string& session_dir, const std::string& node_id) {
  std::vector<std::string> out;
  std::string dir = TraceDir(session_dir);
  if (!CheckOwnDir(dir).ok()) return out;  // (absent, or not this user's alone: nothing read from it)
  std::string prefix = node_id.empty() ? std::string() : ToHex(node_id).substr(0, 12) + "-";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".ring") != 0) continue;
    if (!prefix.empty() && name.compare(0, prefix.size(), prefix) != 0) continue;
    out.push_back(dir + "/" + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

size_t PruneExitedRings(const std::string& session_dir, const std::string& node_id, size_t keep) {
  struct Exited {
    std::string path;
    int64_t mtime_ns;
  };
  std::vector<Exited> exited;
  for (const auto& path : RingFiles(session_dir, node_id)) {
    // NODE-PID.ring
    size_t dash = path.rfind('-'), dot = path.rfind(".ring");
    if (dash == std::string::npos || dot == std::string::npos || dot <= dash + 1) continue;
    pid_t pid = static_cast<pid_t>(std::atoi(path.substr(dash + 1, dot - dash - 1).c_str()));
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) continue;
    exited.push_back({path, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  if (exited.size() <= keep) return 0;
  std::sort(exited.begin(), exited.end(), [](const Exited& a, const Exited& b) { return a.mtime_ns > b.mtime_ns; });
  size_t gone = 0;
  for (size_t i = keep; i < exited.size(); ++i) gone += ::unlink(exited[i].path.c_str()) == 0 ? 1 : 0;
  return gone;
}

}  // namespace phalanx::trace
