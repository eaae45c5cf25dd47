#include "core/frame.h"

#include <gtest/gtest.h>

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
  EXPECT_FALSE(ValidateHeader(FrameHeader{4, kMaxMessageType, 0, 0}).ok());
  EXPECT_FALSE(ValidateHeader(FrameHeader{4, rpc::SEAL_OBJECT, 2, 0}).ok());
  EXPECT_TRUE(ValidateHeader(FrameHeader{0, rpc::GET_STATS, 0, 1}).ok());
}

}  // namespace phalanx
