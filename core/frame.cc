#include "core/frame.h"

namespace phalanx {

Status ValidateHeader(const FrameHeader& h) {
  if (h.length > kMaxFrameBody) {
    return Status::InvalidArgument("malformed frame: body of " + std::to_string(h.length) +
                                   " bytes exceeds the limit of " + std::to_string(kMaxFrameBody));
  }
  if (h.type == 0 || h.type >= kMaxMessageType) {
    return Status::InvalidArgument("malformed frame: unknown message type " + std::to_string(h.type));
  }
  if (h.flags > kReplyFlag) {
    return Status::InvalidArgument("malformed frame: unknown flags " + std::to_string(h.flags));
  }
  return Status::OK();
}

std::string EncodeFrame(uint16_t type, uint16_t flags, uint64_t request_id,
                        const google::protobuf::MessageLite& body) {
  size_t n = body.ByteSizeLong();
  std::string out(kFrameHeaderSize + n, '\0');
  FrameHeader h{static_cast<uint32_t>(n), type, flags, request_id};
  EncodeHeader(h, out.data());
  body.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out.data() + kFrameHeaderSize));
  return out;
}

}  // namespace phalanx
