// Replays every stored fuzz input through the fuzz target's own entry (fuzz/fuzz_entries.h): the
// crashes the fuzzers found (fuzz/regressions/<target>/) and the seed corpus (fuzz/corpus/<target>/).
// Each must end in success or lowbit::Error; any other exception is a reader breaking its promise.
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <typeinfo>
#include <vector>

#include "fuzz/fuzz_entries.h"

namespace lowbit::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> InputsOf(const std::string& target) {
  std::vector<fs::path> files;
  for (const char* kind : {"regressions", "corpus"}) {
    const fs::path dir = fs::path(LOWBIT_SOURCE_DIR) / "fuzz" / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class FuzzInputs : public testing::TestWithParam<std::string> {};

TEST_P(FuzzInputs, EndInSuccessOrLowbitError) {
  const FuzzEntry* entry = FindFuzzEntry(GetParam());
  ASSERT_NE(entry, nullptr);
  const std::vector<fs::path> files = InputsOf(GetParam());
  EXPECT_FALSE(files.empty()) << "no seed corpus for " << GetParam();
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::vector<uint8_t> data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    try {
      RunFuzzEntry(*entry, data);
    } catch (const std::exception& e) {
      ADD_FAILURE() << file.string() << ": " << typeid(e).name() << " escaped (not lowbit::Error): " << e.what();
    }
  }
}

std::vector<std::string> EntryNames() {
  std::vector<std::string> names;
  for (const FuzzEntry& e : AllFuzzEntries()) names.emplace_back(e.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzInputs, testing::ValuesIn(EntryNames()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace lowbit::fuzz
