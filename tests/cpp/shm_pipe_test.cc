// ShmPipe (worker/shm_pipe.h): bytes in order across the ring's end, a pair
// shared by two processes, sleep flags, and a pair whose memory does not
// hold what a pipe must (wrong size, corrupt counters) refused with an error.
#include "worker/shm_pipe.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace phalanx {
namespace {

std::string Pattern(size_t n, uint64_t from) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(((from + i) * 2654435761u) >> 13);
  return s;
}

TEST(ShmPipeTest, BytesInOrderAcrossTheRingsEnd) {
  int fd = -1;
  auto a = ShmPipe::CreatePair(&fd);
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto b = ShmPipe::MapPair(fd);
  ::close(fd);
  ASSERT_TRUE(b.ok()) << b.status().message();
  ShmPipe& out = *a.value().out;
  ShmPipe& in = *b.value().in;
  const size_t cap = ShmPipe::kMinCapacity;
  ASSERT_EQ(out.capacity(), cap);
  ASSERT_EQ(in.capacity(), cap);
  EXPECT_FALSE(in.readable());
  // Three and a half rings' worth through, in pieces that do not divide the ring.
  const std::string all = Pattern(cap * 7 / 2, 0);
  std::string got;
  size_t sent = 0;
  std::vector<char> buf(100003);
  while (got.size() < all.size()) {
    if (sent < all.size()) {
      auto k = out.Put(all.data() + sent, std::min<size_t>(300007, all.size() - sent));
      ASSERT_TRUE(k.ok());
      sent += k.value();
    }
    EXPECT_EQ(out.writable(), sent - got.size() < cap);
    auto k = in.Get(buf.data(), buf.size());
    ASSERT_TRUE(k.ok());
    got.append(buf.data(), k.value());
  }
  EXPECT_TRUE(got == all);
  EXPECT_FALSE(in.readable());
  // Full: a Put takes nothing more.
  std::string fill = Pattern(cap, 7);
  EXPECT_EQ(out.Put(fill.data(), fill.size()).value(), cap);
  EXPECT_FALSE(out.writable());
  EXPECT_EQ(out.Put("x", 1).value(), 0u);
  // The other direction is its own pipe.
  EXPECT_FALSE(a.value().in->readable());
  EXPECT_EQ(b.value().out->Put("hi", 2).value(), 2u);
  char two[2];
  EXPECT_EQ(a.value().in->Get(two, 2).value(), 2u);
  EXPECT_EQ(std::string(two, 2), "hi");
}

TEST(ShmPipeTest, TheCreatorChoosesTheCapacityAndTheOtherEndSeesIt) {
  for (size_t asked : {size_t{0}, size_t{3} << 20, size_t{4} << 20, size_t{1} << 30}) {
    int fd = -1;
    auto a = ShmPipe::CreatePair(&fd, asked);
    ASSERT_TRUE(a.ok());
    auto b = ShmPipe::MapPair(fd);
    ::close(fd);
    ASSERT_TRUE(b.ok());
    size_t want = asked < ShmPipe::kMinCapacity ? ShmPipe::kMinCapacity
                  : asked > ShmPipe::kMaxCapacity ? ShmPipe::kMaxCapacity
                  : asked == (size_t{3} << 20) ? size_t{2} << 20 : asked;
    EXPECT_EQ(a.value().out->capacity(), want) << asked;
    EXPECT_EQ(b.value().in->capacity(), want) << asked;
    std::string all = Pattern(want, 1);
    EXPECT_EQ(a.value().out->Put(all.data(), all.size()).value(), want);
    std::string got(want, '\0');
    EXPECT_EQ(b.value().in->Get(got.data(), want).value(), want);
    EXPECT_TRUE(got == all);
  }
}

TEST(ShmPipeTest, SleepFlagsAreTakenOnce) {
  int fd = -1;
  auto a = ShmPipe::CreatePair(&fd);
  ASSERT_TRUE(a.ok());
  auto b = ShmPipe::MapPair(fd);
  ::close(fd);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(a.value().out->TakeReaderSleeping());
  b.value().in->set_reader_sleeping(true);  // the reader's flag on its in pipe, seen by the writer
  EXPECT_TRUE(a.value().out->TakeReaderSleeping());
  EXPECT_FALSE(a.value().out->TakeReaderSleeping());
  a.value().out->set_writer_sleeping(true);
  EXPECT_TRUE(b.value().in->TakeWriterSleeping());
  EXPECT_FALSE(b.value().in->TakeWriterSleeping());
}

TEST(ShmPipeTest, APairSharedWithAnotherProcess) {
  int fd = -1;
  auto a = ShmPipe::CreatePair(&fd);
  ASSERT_TRUE(a.ok());
  const std::string all = Pattern(5 * ShmPipe::kMinCapacity + 12345, 3);
  pid_t child = ::fork();
  if (child == 0) {  // maps the pair and writes every byte, as a peer rank would
    auto b = ShmPipe::MapPair(fd);
    if (!b.ok()) ::_exit(2);
    size_t sent = 0;
    while (sent < all.size()) {
      auto k = b.value().out->Put(all.data() + sent, all.size() - sent);
      if (!k.ok()) ::_exit(3);
      sent += k.value();
    }
    ::_exit(0);
  }
  ::close(fd);
  std::string got;
  std::vector<char> buf(1 << 16);
  while (got.size() < all.size()) {
    auto k = a.value().in->Get(buf.data(), buf.size());
    ASSERT_TRUE(k.ok());
    got.append(buf.data(), k.value());
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(got == all);
}

TEST(ShmPipeTest, MemoryThatIsNotAPairIsRefused) {
  int fd = ::memfd_create("not-a-pair", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  auto b = ShmPipe::MapPair(fd);
  ::close(fd);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("size"), std::string::npos) << b.status().message();
}

TEST(ShmPipeTest, CorruptCountersEndTheStreamWithAnError) {
  int fd = -1;
  auto a = ShmPipe::CreatePair(&fd);
  ASSERT_TRUE(a.ok());
  auto b = ShmPipe::MapPair(fd);
  ASSERT_TRUE(b.ok());
  // A peer that writes nonsense into the counters: the first pipe's head
  // (the creator writes it) says more bytes than the pipe holds.
  void* raw = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(raw, MAP_FAILED);
  uint64_t huge = ShmPipe::kMinCapacity * 3;
  std::memcpy(raw, &huge, sizeof(huge));  // (head is the header's first field)
  char buf[64];
  auto k = b.value().in->Get(buf, sizeof(buf));
  EXPECT_FALSE(k.ok());
  // ... and a tail past the head: the writer refuses to write.
  uint64_t zero = 0, past = 12;
  std::memcpy(raw, &zero, sizeof(zero));
  std::memcpy(static_cast<char*>(raw) + 64, &past, sizeof(past));  // (tail: the next cache line)
  EXPECT_FALSE(a.value().out->Put("x", 1).ok());
  ::munmap(raw, 4096);
}

}  // namespace
}  // namespace phalanx
