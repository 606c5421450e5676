// Output helpers shared by the commands: aligned human tables and number formatting.
#pragma once

#include <string>
#include <string_view>
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
  explicit ProgressBar(std::string label, size_t total = 0);
  ~ProgressBar();
  // `detail` names the item in progress (e.g. the tensor being quantized), after the count.
  void Update(size_t done, std::string_view detail = {});
  // For work whose size is known only once it starts (a library call's progress callback).
  void Update(size_t done, size_t total, std::string_view detail = {}) {
    total_ = total;
    Update(done, detail);
  }

 private:
  std::string label_;
  size_t total_;
  bool enabled_;
  size_t printed_ = 0;  // the longest line so far, blanked when the next one is shorter
};

}  // namespace lowbit::cli
