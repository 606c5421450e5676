#include "cli/output.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace lowbit::cli {
namespace {
bool LooksNumeric(const std::string& s) {
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+') && s != "-";
}
}  // namespace

void PrintTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto print_row = [&](const std::vector<std::string>& row, bool is_header) {
    std::string line;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      const bool right = !is_header && c > 0 && LooksNumeric(cell);
      line += right ? fmt::format("{:>{}}", cell, width[c]) : fmt::format("{:<{}}", cell, width[c]);
      if (c + 1 < width.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::puts(line.c_str());
  };
  print_row(header, true);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  std::puts(std::string(total > 2 ? total - 2 : 0, '-').c_str());
  for (const auto& row : rows) print_row(row, false);
}

std::string FormatNumber(double v, int precision) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e6)) return fmt::format("{:.{}g}", v, precision);
  return fmt::format("{:.{}g}", v, precision + 2);
}

}  // namespace lowbit::cli

#include <unistd.h>

namespace lowbit::cli {

ProgressBar::ProgressBar(std::string label, size_t total)
    : label_(std::move(label)), total_(total), enabled_(isatty(STDERR_FILENO) != 0) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && printed_ > 0) std::fprintf(stderr, "\r%*s\r", static_cast<int>(printed_), "");
}

void ProgressBar::Update(size_t done, std::string_view detail) {
  if (!enabled_ || total_ == 0) return;
  constexpr size_t kWidth = 30;
  const size_t filled = kWidth * std::min(done, total_) / total_;
  const std::string line = fmt::format("{} [{}{}] {}/{} {}", label_, std::string(filled, '#'),
                                       std::string(kWidth - filled, '.'), done, total_, detail);
  printed_ = std::max(printed_, line.size());
  std::fprintf(stderr, "\r%-*s", static_cast<int>(printed_), line.c_str());
  std::fflush(stderr);
}

}  // namespace lowbit::cli
