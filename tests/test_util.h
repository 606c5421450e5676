// Shared test helpers.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"

namespace lowbit::testing_util {

// Runs `f`, which must throw lowbit::Error with every one of `needles` in its message.
template <class F>
void ExpectError(F&& f, std::initializer_list<std::string_view> needles) {
  try {
    f();
    ADD_FAILURE() << "expected lowbit::Error";
  } catch (const Error& e) {
    for (std::string_view needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A fresh scratch folder per test (under the temp directory, named after `prefix`, the pid and a counter),
// removed afterwards.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Names in the scratch folder, so tests can see that no temp folder was left behind.
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

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

// Caps the kernels' instruction sets (LOWBIT_CPU's levels) for a scope; a model loaded inside keeps
// the layouts of that level.
class AtCpuLevel {
 public:
  explicit AtCpuLevel(CpuLevel level) : saved_(CpuLevelCap()) { SetCpuLevelCap(level); }
  ~AtCpuLevel() { SetCpuLevelCap(saved_); }
  AtCpuLevel(const AtCpuLevel&) = delete;
  AtCpuLevel& operator=(const AtCpuLevel&) = delete;

 private:
  CpuLevel saved_;
};

// Runs `fn(level)` at each level from the current cap down (AVX-512, AVX2, SSE4 where the CPU has
// them), so that the AVX2 paths are tested on AVX-512 machines too.
template <class Fn>
void ForEachCpuLevel(Fn&& fn) {
  const CpuLevel cap = CpuLevelCap();
  for (CpuLevel level : {CpuLevel::kAvx512, CpuLevel::kAvx2, CpuLevel::kSse4}) {
    if (level > cap) continue;
    AtCpuLevel at(level);
    fn(level);
  }
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
