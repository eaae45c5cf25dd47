// Remote functions in a shared library, for cpp_lib_test: the generic
// phalanx-cpp-worker loads this library to run them.
#include <unistd.h>

#include <string>

#include "phalanx/api.h"

int LibTimes(int a, int b) { return a * b; }

std::string LibWhoRuns(int) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
}

PHALANX_REMOTE(LibTimes, LibWhoRuns);
