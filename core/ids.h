// Identifiers. A TaskId is 16 bytes: the submitting client's 8-byte id and a
// per-client counter, so ids are unique without coordination. An ObjectId is
// 20 bytes: the TaskId that creates it and a 4-byte return index (puts use a
// put-counter TaskId and index 0). Ids are plain byte strings on the wire.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace phalanx {

inline constexpr size_t kClientIdSize = 8;
inline constexpr size_t kTaskIdSize = 16;
inline constexpr size_t kObjectIdSize = 20;

// Random bytes from the OS; used for client, node and worker ids.
std::string RandomBytes(size_t n);
std::string ToHex(const std::string& bytes);
// Returns an empty string when `hex` is not valid hex.
std::string FromHex(const std::string& hex);

std::string MakeTaskId(const std::string& client_id, uint64_t counter);
// The counter in a task id made by a CoreWorker says what made it: odd, a
// put's; kActorCallIdBit set, an actor's method call; else a task, an actor's
// creation or a placement group.
inline constexpr uint64_t kActorCallIdBit = 2;
bool IsActorCallId(const std::string& task_id);
std::string MakeObjectId(const std::string& task_id, uint32_t index);
// The first 8 bytes of a client id, or of an id it made (task and object
// ids start with their creator's client id): a key for sets of creators.
// REQUIRES: id.size() >= kClientIdSize.
inline uint64_t CreatorKey(const std::string& id) {
  uint64_t key;
  std::memcpy(&key, id.data(), sizeof(key));
  return key;
}

// The creating task of an object id. REQUIRES: object_id.size() == kObjectIdSize.
inline std::string TaskIdOf(const std::string& object_id) { return object_id.substr(0, kTaskIdSize); }
// Its index: a return's (1, 2, ...), 0 for a put. REQUIRES: object_id.size() == kObjectIdSize.
inline uint32_t IndexOf(const std::string& object_id) {
  uint32_t index;
  std::memcpy(&index, object_id.data() + kTaskIdSize, sizeof(index));
  return index;
}

}  // namespace phalanx
