#include "core/ids.h"

#include <fcntl.h>
#include <unistd.h>

#include <random>

#include "core/logging.h"

namespace phalanx {

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  std::random_device rd;  // reads /dev/urandom on Linux
  for (size_t i = 0; i < n; i += 4) {
    uint32_t v = rd();
    for (size_t j = 0; j < 4 && i + j < n; ++j) out[i + j] = static_cast<char>((v >> (8 * j)) & 0xff);
  }
  return out;
}

std::string ToHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto c = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kDigits[c >> 4];
    out[2 * i + 1] = kDigits[c & 0xf];
  }
  return out;
}

static int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string FromHex(const std::string& hex) {
  if (hex.size() % 2 != 0) return "";
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return "";
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string MakeTaskId(const std::string& client_id, uint64_t counter) {
  PHALANX_CHECK(client_id.size() == kClientIdSize) << client_id.size();
  std::string id = client_id;
  id.resize(kTaskIdSize);
  std::memcpy(&id[kClientIdSize], &counter, sizeof(counter));
  return id;
}

bool IsActorCallId(const std::string& task_id) {
  if (task_id.size() != kTaskIdSize) return false;
  uint64_t counter;
  std::memcpy(&counter, task_id.data() + kClientIdSize, sizeof(counter));
  return (counter & 1) == 0 && (counter & kActorCallIdBit) != 0;
}

std::string MakeObjectId(const std::string& task_id, uint32_t index) {
  PHALANX_CHECK(task_id.size() == kTaskIdSize) << task_id.size();
  std::string id = task_id;
  id.resize(kObjectIdSize);
  std::memcpy(&id[kTaskIdSize], &index, sizeof(index));
  return id;
}

}  // namespace phalanx
