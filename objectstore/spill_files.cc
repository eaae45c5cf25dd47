#include "objectstore/spill_files.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <boost/asio/post.hpp>

#include "core/ids.h"
#include "core/logging.h"

namespace phalanx::objectstore {

namespace {
constexpr uint64_t kStep = 8ull << 20;  // one pwrite/pread

std::string Mib(uint64_t b) { return std::to_string(b >> 20) + " MiB"; }

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads `size` bytes of `fd` from offset 0 into `dest`.
Status ReadAll(int fd, uint8_t* dest, uint64_t size) {
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, dest + done, std::min(kStep, size - done), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Unavailable(std::string("read failed: ") + std::strerror(errno));
    if (n == 0) return Status::Unavailable("the file ends after " + std::to_string(done) + " of " + std::to_string(size) + " bytes");
    done += static_cast<uint64_t>(n);
  }
  return Status::OK();
}
}  // namespace

SpillFiles::SpillFiles(boost::asio::io_context& io, SpillOptions options)
    : io_(io), options_(std::move(options)), thread_([this] { Run(); }) {}

SpillFiles::~SpillFiles() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& job : jobs_) ::close(job.fd);  // (never started)
  if (dir_made_) {
    std::error_code ec;
    std::filesystem::remove_all(options_.dir, ec);
  }
}

std::string SpillFiles::PathOf(const std::string& id) const { return options_.dir + "/" + ToHex(id); }

uint64_t SpillFiles::SizeOf(const std::string& id) const {
  auto it = files_.find(id);
  return it == files_.end() ? 0 : it->second;
}

Status SpillFiles::CheckRoom(uint64_t size, uint64_t credit) const {
  size = size > credit ? size - credit : 0;
  if (options_.max_bytes > 0 && stats_.bytes + size > options_.max_bytes) {
    return Status::OutOfMemory("the spill limit is reached (" + Describe() + ")");
  }
  struct statvfs fs {};
  if (::statvfs(options_.dir.c_str(), &fs) == 0 && fs.f_blocks > 0) {
    double total = static_cast<double>(fs.f_blocks) * fs.f_frsize;
    double avail = static_cast<double>(fs.f_bavail) * fs.f_frsize;
    if (total - avail + static_cast<double>(size) > options_.max_disk_fraction * total) {
      return Status::OutOfMemory("the disk under " + options_.dir + " would pass " +
                                 std::to_string(static_cast<int>(options_.max_disk_fraction * 100)) + "% full (" +
                                 Mib(static_cast<uint64_t>(avail)) + " free; " + Describe() + ")");
    }
  }
  return Status::OK();
}

Status SpillFiles::Spill(const std::string& id, const uint8_t* data, uint64_t size, uint64_t credit) {
  if (files_.count(id)) return Status::OK();  // (ids name immutable values)
  if (!dir_made_) {
    std::error_code ec;
    std::filesystem::create_directories(options_.dir, ec);
    if (ec) return Status::Unavailable("cannot make the spill folder " + options_.dir + ": " + ec.message());
    dir_made_ = true;
  }
  PHALANX_RETURN_IF_ERROR(CheckRoom(size, credit));
  auto t0 = std::chrono::steady_clock::now();
  std::string path = PathOf(id);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Unavailable("cannot create " + path + ": " + std::strerror(errno));
  uint64_t done = 0;
  std::string failed;
  if (size > 0 && ::posix_fallocate(fd, 0, static_cast<off_t>(size)) != 0) {  // (the extents at once; a full disk says so here)
    failed = "no room for it on the disk";
  }
  while (failed.empty() && done < size) {
    ssize_t n = ::pwrite(fd, data + done, std::min(kStep, size - done), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed = n < 0 ? std::strerror(errno) : "no progress";
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  if (!failed.empty()) {
    ::unlink(path.c_str());
    return Status::Unavailable("cannot write " + path + " (" + std::to_string(done) + " of " + std::to_string(size) +
                           " bytes): " + failed);
  }
  files_[id] = size;
  stats_.objects++;
  stats_.bytes += size;
  stats_.spilled_objects++;
  stats_.spilled_bytes += size;
  stats_.spill_seconds += SecondsSince(t0);
  return Status::OK();
}

void SpillFiles::Restore(const std::string& id, uint8_t* dest, std::shared_ptr<const void> keep,
                         std::function<void(Status)> done) {
  auto it = files_.find(id);
  if (it == files_.end()) return done(Status::NotFound("object " + ToHex(id) + " has no spill file"));
  std::string path = PathOf(id);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return done(Status::Unavailable("cannot open " + path + ": " + std::strerror(errno)));
  {
    std::lock_guard<std::mutex> l(mu_);
    jobs_.push_back(Job{fd, dest, it->second, std::move(keep), std::move(done)});
  }
  cv_.notify_one();
}

Status SpillFiles::RestoreNow(const std::string& id, uint8_t* dest) {
  auto it = files_.find(id);
  if (it == files_.end()) return Status::NotFound("object " + ToHex(id) + " has no spill file");
  std::string path = PathOf(id);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Unavailable("cannot open " + path + ": " + std::strerror(errno));
  auto t0 = std::chrono::steady_clock::now();
  Status st = ReadAll(fd, dest, it->second);
  ::close(fd);
  if (st.ok()) {
    stats_.restored_objects++;
    stats_.restored_bytes += it->second;
    stats_.restore_seconds += SecondsSince(t0);
  }
  return st;
}

void SpillFiles::Run() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    auto t0 = std::chrono::steady_clock::now();
    Status st = ReadAll(job.fd, job.dest, job.size);
    ::close(job.fd);
    double seconds = SecondsSince(t0);
    std::weak_ptr<char> alive = alive_;
    boost::asio::post(io_, [this, alive, st, seconds, size = job.size, keep = std::move(job.keep),
                            done = std::move(job.done)]() mutable {
      if (alive.expired()) return;
      if (st.ok()) {
        stats_.restored_objects++;
        stats_.restored_bytes += size;
        stats_.restore_seconds += seconds;
      }
      done(st);
      keep.reset();
    });
  }
}

void SpillFiles::Remove(const std::string& id) {
  auto it = files_.find(id);
  if (it == files_.end()) return;
  stats_.objects--;
  stats_.bytes -= it->second;
  files_.erase(it);
  ::unlink(PathOf(id).c_str());  // (a read in progress keeps its descriptor)
}

SpillStats SpillFiles::Stats() const { return stats_; }

std::string SpillFiles::Describe() const {
  std::string s = Mib(stats_.bytes) + " in " + std::to_string(stats_.objects) + " objects on disk under " + options_.dir;
  s += options_.max_bytes > 0 ? ", limit " + Mib(options_.max_bytes) : ", no limit but the disk's";
  return s;
}

}  // namespace phalanx::objectstore
