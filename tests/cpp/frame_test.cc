#include "core/frame.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/frame_reader.h"
#include "core/proto/phalanx.pb.h"

namespace phalanx {

TEST(FrameTest, EncodesHeaderAndBodyRoundTrip) {
  rpc::SealObject m;
  m.set_object_id(std::string(20, 'x'));
  std::string f = EncodeFrame(rpc::SEAL_OBJECT, kReplyFlag, 77, m);
  FrameHeader h = DecodeHeader(f.data());
  EXPECT_EQ(h.length, f.size() - kFrameHeaderSize);
  EXPECT_EQ(h.type, rpc::SEAL_OBJECT);
  EXPECT_EQ(h.flags, kReplyFlag);
  EXPECT_EQ(h.request_id, 77u);
  rpc::SealObject back;
  ASSERT_TRUE(back.ParseFromArray(f.data() + kFrameHeaderSize, static_cast<int>(h.length)));
  EXPECT_EQ(back.object_id(), m.object_id());
}

TEST(FrameTest, RejectsOversizedUnknownAndBadFlags) {
  EXPECT_FALSE(ValidateHeader(FrameHeader{kMaxFrameBody + 1, rpc::SEAL_OBJECT, 0, 0}).ok());
  EXPECT_FALSE(ValidateHeader(FrameHeader{4, 0, 0, 0}).ok());
  EXPECT_FALSE(ValidateHeader(FrameHeader{4, static_cast<uint16_t>(rpc::MessageType_MAX + 1), 0, 0}).ok());
  EXPECT_FALSE(ValidateHeader(FrameHeader{4, rpc::SEAL_OBJECT, 2, 0}).ok());
  EXPECT_TRUE(ValidateHeader(FrameHeader{0, rpc::GET_STATS, 0, 1}).ok());
}

TEST(FrameTest, EachTypeHasItsOwnLimit) {
  // Control messages are small; a kill of 1 MiB is malformed, a task of 1 MiB is not.
  EXPECT_FALSE(ValidateHeader(FrameHeader{1u << 20, rpc::KILL_ACTOR, 0, 1}).ok());
  EXPECT_TRUE(ValidateHeader(FrameHeader{1u << 20, rpc::FORWARD_TASK, 0, 1}).ok());
  EXPECT_FALSE(ValidateHeader(FrameHeader{kValueBody + 1, rpc::FORWARD_TASK, 0, 1}).ok());
  // A pull asks in a few bytes; its reply carries the range.
  EXPECT_FALSE(ValidateHeader(FrameHeader{1u << 20, rpc::PULL_OBJECT, 0, 1}).ok());
  EXPECT_TRUE(ValidateHeader(FrameHeader{1u << 20, rpc::PULL_OBJECT, kReplyFlag, 1}).ok());
  EXPECT_FALSE(ValidateHeader(FrameHeader{kHandshakeBody + 1, rpc::AUTH_HELLO, 0, 0}).ok());
}

// Feeds `bytes` to the reader as reads of at most `step` bytes; returns the frames' types.
std::vector<uint16_t> Feed(FrameReader& r, const std::string& bytes, size_t step, Status* error) {
  std::vector<uint16_t> types;
  size_t off = 0;
  while (off < bytes.size()) {
    auto space = r.Space();
    if (!space.ok()) {
      *error = space.status();
      return types;
    }
    size_t n = std::min({space.value().second, step, bytes.size() - off});
    std::memcpy(space.value().first, bytes.data() + off, n);
    r.Commit(n);
    off += n;
    while (true) {
      FrameHeader h;
      const char* body;
      auto got = r.Next(&h, &body);
      if (!got.ok()) {
        *error = got.status();
        return types;
      }
      if (!got.value()) break;
      types.push_back(h.type);
    }
  }
  return types;
}

TEST(FrameReaderTest, HandsOutFramesInOrderWhateverTheReadSizes) {
  std::string bytes;
  rpc::PutInline big;
  big.set_data(std::string(300 << 10, 'x'));
  for (int i = 0; i < 5; ++i) {
    bytes += EncodeFrame(rpc::SEAL_OBJECT, 0, i, rpc::SealObject());
    bytes += EncodeFrame(rpc::PUT_INLINE, 0, i, big);
  }
  for (size_t step : {size_t{1}, size_t{7}, size_t{4096}, size_t{1} << 20}) {
    FrameReader r(64);
    Status err;
    auto types = Feed(r, bytes, step, &err);
    ASSERT_TRUE(err.ok()) << err.ToString();
    ASSERT_EQ(types.size(), 10u) << "step " << step;
    for (size_t i = 0; i < types.size(); ++i) EXPECT_EQ(types[i], i % 2 ? rpc::PUT_INLINE : rpc::SEAL_OBJECT);
  }
}

TEST(FrameReaderTest, MemoryFollowsTheBytesThatArrivedNotTheDeclaredLength) {
  FrameReader r(1024);
  std::string header(kFrameHeaderSize, '\0');
  EncodeHeader(FrameHeader{kValueBody, rpc::FORWARD_TASK, 0, 1}, header.data());  // 512 MiB declared
  Status err;
  Feed(r, header, 16, &err);
  ASSERT_TRUE(err.ok());
  EXPECT_LE(r.capacity(), 4096u);
  Feed(r, std::string(1 << 20, 'x'), 1 << 16, &err);  // 1 MiB of it arrives
  ASSERT_TRUE(err.ok());
  EXPECT_LE(r.capacity(), 3u << 20);  // at most about double what arrived
}

TEST(FrameReaderTest, RefusesOversizedFramesAtTheHeader) {
  FrameReader r;
  std::string header(kFrameHeaderSize, '\0');
  EncodeHeader(FrameHeader{1u << 30, rpc::SUBMIT_TASK, 0, 1}, header.data());
  Status err;
  Feed(r, header, 16, &err);
  EXPECT_EQ(err.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(err.message().find("exceeds its limit"), std::string::npos) << err.ToString();
}

TEST(FrameReaderTest, BeforeTheHandshakeOnlyHandshakeFramesPass) {
  FrameReader r;
  r.set_handshake_only(true);
  Status err;
  Feed(r, EncodeFrame(rpc::KILL_ACTOR, 0, 1, rpc::KillActor()), 64, &err);
  EXPECT_FALSE(err.ok());
  FrameReader during;
  during.set_handshake_only(true);
  Status ok;
  EXPECT_EQ(Feed(during, EncodeFrame(rpc::AUTH_HELLO, 0, 0, rpc::AuthHello()), 64, &ok).size(), 1u);
  EXPECT_TRUE(ok.ok());
  FrameReader after;  // and no handshake frame outside the handshake
  Status late;
  Feed(after, EncodeFrame(rpc::AUTH_HELLO, 0, 0, rpc::AuthHello()), 64, &late);
  EXPECT_FALSE(late.ok());
}

TEST(FrameReaderTest, TheProcessBudgetStopsGrowthBeyondIt) {
  FrameReader::SetProcessLimit(8u << 20);
  {
    FrameReader a, b;
    std::string header(kFrameHeaderSize, '\0');
    EncodeHeader(FrameHeader{kValueBody, rpc::FORWARD_TASK, 0, 1}, header.data());
    Status err;
    Feed(a, header + std::string(6 << 20, 'x'), 1 << 20, &err);
    EXPECT_TRUE(err.ok()) << err.ToString();
    Feed(b, header + std::string(6 << 20, 'x'), 1 << 20, &err);
    EXPECT_EQ(err.code(), StatusCode::kOutOfMemory) << err.ToString();
  }
  EXPECT_EQ(FrameReader::ProcessCharged(), 0u);  // all given back with the readers
  FrameReader::SetProcessLimit(size_t{2} << 30);
}

}  // namespace phalanx
