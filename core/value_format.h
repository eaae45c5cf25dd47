// The layout of a serialized value, shared by its writer
// (python/bindings/serialization.cc), the raylet's reduce
// (collectives/reduce_manager.cc) and phalanx/_private/serialization.py:
//
//   u32 magic "PHX1" | u32 kind | u32 nbuf | u32 dtype | u64 meta_len | u64 len[nbuf]
//   | meta (pickle stream) | buffer 0 at 64-byte alignment | buffer 1 ... |
//
// `dtype` is 0, or for a C-contiguous numpy array of a numeric type its
// element type (collectives::DType + 1). A GPU object's value
// (phalanx/_private/gpu_objects.py) has one more buffer, last: its
// descriptor, kDeviceDescriptorBytes long, which readers trust only in the
// object it names (a reduce's result, made of an input's bytes, is read as
// plain bytes).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace phalanx::value_format {

constexpr uint32_t kMagic = 0x31584850;  // "PHX1"
constexpr uint32_t kKindValue = 0;
constexpr uint32_t kKindError = 1;       // the value is an exception its task raised
constexpr uint64_t kDeviceDescriptorBytes = 256;

// Bytes before the pickle stream.
constexpr uint64_t HeaderSize(uint64_t nbuf) { return 24 + 8 * nbuf; }
// Where a buffer starts after `offset` (store offsets are 64-byte aligned too).
constexpr uint64_t AlignBuffer(uint64_t offset) { return (offset + 63) & ~63ull; }

// Whether `value` (a whole serialized value, or its first bytes) is an
// exception its task raised: a get of several ends at the first such.
inline bool IsError(std::string_view value) {
  uint32_t head[2];
  if (value.size() < sizeof(head)) return false;
  std::memcpy(head, value.data(), sizeof(head));
  return head[0] == kMagic && head[1] == kKindError;
}

}  // namespace phalanx::value_format
