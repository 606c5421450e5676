// Output helpers shared by the commands: aligned human tables and number formatting.
#pragma once

#include <string>
#include <vector>

namespace lowbit::cli {

// Prints rows as an aligned table with a header rule; numeric-looking cells are right-aligned.
void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

std::string FormatNumber(double v, int precision = 4);  // "-" for NaN, "inf" for infinity

}  // namespace lowbit::cli

namespace lowbit::cli {

// A progress bar on stderr, drawn only when stderr is a terminal (logs stay clean).
class ProgressBar {
 public:
  ProgressBar(std::string label, size_t total);
  ~ProgressBar();
  void Update(size_t done);

 private:
  std::string label_;
  size_t total_;
  bool enabled_;
};

}  // namespace lowbit::cli
