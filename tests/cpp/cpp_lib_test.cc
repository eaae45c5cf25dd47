// The generic C++ worker: functions that live in a shared library run in
// phalanx-cpp-worker processes that load it, not in this program.
#include <gtest/gtest.h>

#include <string>

#include "phalanx/api.h"

int LibTimes(int a, int b);
std::string LibWhoRuns(int);

TEST(CppLibraryTest, GenericWorkerLoadsTheLibraryAndRunsItsFunctions) {
  phalanx::Init(phalanx::InitOptions{"", {PHALANX_TEST_LIB_PATH}});
  EXPECT_EQ(*phalanx::Get(phalanx::Task(LibTimes).Remote(6, 7)), 42);
  std::string exe = *phalanx::Get(phalanx::Task(LibWhoRuns).Remote(0));
  EXPECT_NE(exe.find("phalanx-cpp-worker"), std::string::npos) << exe;
  phalanx::Shutdown();
}
