#include "core/logging.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <unistd.h>

namespace phalanx {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("PHALANX_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

LogLevel g_min_level = LevelFromEnv();
const char kLevelChar[] = {'D', 'I', 'W', 'E'};

}  // namespace

LogLevel MinLogLevel() { return g_min_level; }
void SetMinLogLevel(LogLevel level) { g_min_level = level; }

void EmitLog(LogLevel level, const char* file, int line, const std::string& text) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::fprintf(stderr, "[%c %s.%03d %d %s:%d] %s\n", kLevelChar[static_cast<int>(level)], stamp, ms,
               static_cast<int>(getpid()), base, line, text.c_str());
}

void CheckFailed(const char* cond, const char* file, int line, const std::string& msg) {
  EmitLog(LogLevel::kError, file, line, std::string("check failed: ") + cond + " " + msg);
  std::abort();
}

}  // namespace phalanx
