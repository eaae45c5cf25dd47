// The frame format shared by every socket in phalanx (Unix and TCP):
//
//   | u32 body length | u16 type | u16 flags | u64 request id | body ... |
//
// little-endian, 16-byte header, body = one serialized protobuf message whose
// kind the type names (rpc::MessageType). A reply carries kReplyFlag and the
// request id of its request. A frame longer than its type's limit
// (MaxFrameBody) or with an unknown type is malformed: the receiver closes
// that connection and logs the peer, the rest of the process goes on.
// Receivers never allocate by a declared length (core/frame_reader.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include <google/protobuf/message_lite.h>

#include "core/status.h"

namespace phalanx {

inline constexpr size_t kFrameHeaderSize = 16;
inline constexpr uint32_t kMaxFrameBody = 1u << 30;  // 1 GiB: no frame is larger (larger values go through the store)
// Per-type limits (MaxFrameBody): the handshake, control messages of fixed
// fields, control messages with lists of ids, and messages that carry values.
inline constexpr uint32_t kHandshakeBody = 256;
inline constexpr uint32_t kSmallBody = 64u << 10;
inline constexpr uint32_t kListBody = 64u << 20;
inline constexpr uint32_t kValueBody = 512u << 20;
inline constexpr uint16_t kReplyFlag = 1;

struct FrameHeader {
  uint32_t length = 0;
  uint16_t type = 0;
  uint16_t flags = 0;
  uint64_t request_id = 0;
};

inline void EncodeHeader(const FrameHeader& h, char* out) {
  std::memcpy(out, &h.length, 4);
  std::memcpy(out + 4, &h.type, 2);
  std::memcpy(out + 6, &h.flags, 2);
  std::memcpy(out + 8, &h.request_id, 8);
}

inline FrameHeader DecodeHeader(const char* in) {
  FrameHeader h;
  std::memcpy(&h.length, in, 4);
  std::memcpy(&h.type, in + 4, 2);
  std::memcpy(&h.flags, in + 6, 2);
  std::memcpy(&h.request_id, in + 8, 8);
  return h;
}

// The largest body a frame of this type (request, or reply with kReplyFlag)
// may have; 0 for types no peer sends.
uint32_t MaxFrameBody(uint16_t type, uint16_t flags);
inline bool IsHandshake(uint16_t type) { return type >= 50 && type <= 52; }

// OK when the header could belong to a well-formed frame: known type and
// flags, body within its type's limit.
Status ValidateHeader(const FrameHeader& h);

// Header and body in one string, ready to write.
std::string EncodeFrame(uint16_t type, uint16_t flags, uint64_t request_id,
                        const google::protobuf::MessageLite& body);

}  // namespace phalanx
