// Shared test helpers.
#pragma once

#include <hwy/targets.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace lowbit::testing_util {

// Runs `fn(target_name)` once for every SIMD target this CPU supports and this binary contains,
// forcing dynamic dispatch to that target; restores the default choice afterwards.
template <class Fn>
void ForEachTarget(Fn&& fn) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    fn(std::string(hwy::TargetName(target)));
  }
  hwy::SetSupportedTargetsForTest(0);
}

#ifdef LOWBIT_BINARY
struct RunResult {
  int status;
  std::string out;  // stdout + stderr
};

// Runs the lowbit binary with `args` from the source folder (so models/ and data/ resolve).
inline RunResult RunLowbit(const std::string& args) {
  const std::string cmd = std::string("cd " LOWBIT_SOURCE_DIR " && " LOWBIT_BINARY " ") + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  return {WEXITSTATUS(pclose(pipe)), out};
}
#endif

}  // namespace lowbit::testing_util
