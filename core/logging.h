// Minimal logging and invariant checks. PHALANX_CHECK aborts with the
// condition, file and line when a broken invariant means the process cannot
// go on safely. Logs go to stderr (the raylet's stderr is its log file).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace phalanx {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below this level are dropped. Set from PHALANX_LOG_LEVEL at start.
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);
void EmitLog(LogLevel level, const char* file, int line, const std::string& text);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line) : level_(level), file_(file), line_(line) {}
  ~LogMessage() { EmitLog(level_, file_, line_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

[[noreturn]] void CheckFailed(const char* cond, const char* file, int line, const std::string& msg);

}  // namespace phalanx

#define PHALANX_LOG(level)                                                   \
  if (::phalanx::LogLevel::k##level < ::phalanx::MinLogLevel()) {           \
  } else                                                                     \
    ::phalanx::LogMessage(::phalanx::LogLevel::k##level, __FILE__, __LINE__).stream()

#define PHALANX_CHECK(cond)                                                   \
  if (cond) {                                                                 \
  } else                                                                      \
    for (std::ostringstream _os;; ::phalanx::CheckFailed(#cond, __FILE__, __LINE__, _os.str())) _os
