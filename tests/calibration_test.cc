// Calibration windows drawn from text: lengths, reproducibility, contiguity in the lines' token
// stream, and that only the lines the windows touch are tokenized. A toy encoder (one token per
// byte) makes the expected stream obvious.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "model/calibration.h"

namespace lowbit {
namespace {

std::vector<int32_t> BytesAsTokens(std::string_view line) { return {line.begin(), line.end()}; }

std::string NumberedLines(size_t n) {
  std::string text;
  for (size_t i = 0; i < n; ++i) text += "line " + std::to_string(i) + " of the text\n";
  return text;
}

TEST(SampleTextWindows, WindowsAreContiguousRunsOfTheLinesTokens) {
  const std::string text = NumberedLines(500);
  std::string stream;  // the lines' tokens one after another: the text without its newlines
  for (const char c : text)
    if (c != '\n') stream += c;
  const auto windows = SampleTextWindows(text, BytesAsTokens, 40, 50, 7);
  ASSERT_EQ(windows.size(), 40u);
  std::set<size_t> starts;
  size_t mid_line = 0;
  for (const auto& w : windows) {
    ASSERT_EQ(w.size(), 50u);
    const size_t at = stream.find(std::string(w.begin(), w.end()));
    ASSERT_NE(at, std::string::npos);
    starts.insert(at);
    mid_line += stream.compare(at, 5, "line ") != 0;
  }
  EXPECT_GT(starts.size(), 35u);  // spread over the text
  EXPECT_GT(mid_line, 20u);       // starts anywhere in a line, not only at line starts
}

TEST(SampleTextWindows, SeedDecidesTheWindows) {
  const std::string text = NumberedLines(300);
  EXPECT_EQ(SampleTextWindows(text, BytesAsTokens, 8, 30, 1), SampleTextWindows(text, BytesAsTokens, 8, 30, 1));
  EXPECT_NE(SampleTextWindows(text, BytesAsTokens, 8, 30, 1), SampleTextWindows(text, BytesAsTokens, 8, 30, 2));
}

TEST(SampleTextWindows, TokenizesOnlyTheLinesItTouches) {
  const std::string text = NumberedLines(20000);
  size_t encoded = 0;
  const auto counting = [&](std::string_view line) {
    ++encoded;
    return BytesAsTokens(line);
  };
  SampleTextWindows(text, counting, 4, 60, 3);
  EXPECT_LT(encoded, 40u);  // 4 windows of 60 bytes span a few lines of ~20 bytes each
}

TEST(SampleTextWindows, CutsVeryLongLinesAtSpaces) {
  std::string text;  // one line of 400 KB: a book on one line, as some corpora have
  for (size_t i = 0; text.size() < 400000; ++i) text += "word" + std::to_string(i) + " ";
  size_t encoded_bytes = 0;
  const auto counting = [&](std::string_view segment) {
    EXPECT_LE(segment.size(), 2048u);
    EXPECT_NE(segment.front(), ' ');  // cut at a space, which is dropped: words stay whole
    encoded_bytes += segment.size();
    return BytesAsTokens(segment);
  };
  const auto windows = SampleTextWindows(text, counting, 16, 100, 5);
  ASSERT_EQ(windows.size(), 16u);
  EXPECT_LT(encoded_bytes, 16u * 3 * 2048);  // a few segments per window, not the whole line
}

TEST(SampleTextWindows, RejectsTextShorterThanAWindowAndEmptyText) {
  try {
    SampleTextWindows("a short line\nand another\n", BytesAsTokens, 1, 100, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SampleTextWindows("", BytesAsTokens, 1, 4, 0), Error);
  EXPECT_THROW(SampleTextWindows("text", BytesAsTokens, 0, 4, 0), Error);
}

}  // namespace
}  // namespace lowbit
