// phalanx-cpp-worker: the generic C++ worker. It loads the shared libraries
// named in PHALANX_CPP_LIBS (colon-separated), whose PHALANX_REMOTE
// registrations fill the registry as they load, then runs the worker loop.
// Started by a raylet for drivers that pass InitOptions::code_libraries.
#include <dlfcn.h>

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "phalanx/api.h"

int main() {
  const char* libs = std::getenv("PHALANX_CPP_LIBS");
  if (libs == nullptr || *libs == '\0') {
    std::cerr << "phalanx-cpp-worker: PHALANX_CPP_LIBS names no library to load\n";
    return 2;
  }
  std::stringstream ss(libs);
  std::string path;
  while (std::getline(ss, path, ':')) {
    if (path.empty()) continue;
    if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      std::cerr << "phalanx-cpp-worker: cannot load " << path << ": " << ::dlerror() << "\n";
      return 3;
    }
  }
  phalanx::internal::RunWorkerLoop();
}
