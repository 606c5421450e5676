#include "quant/error_report.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace lowbit {

ErrorReport MeasureError(std::span<const float> original, std::span<const float> dequantized, uint64_t rows,
                         uint64_t cols) {
  LOWBIT_CHECK(original.size() == dequantized.size() && original.size() == rows * cols);
  ErrorReport r;
  double signal = 0, noise = 0;
  for (uint64_t row = 0; row < rows; ++row) {
    double row_noise = 0;
    for (uint64_t c = 0; c < cols; ++c) {
      const double x = original[row * cols + c];
      const double d = x - dequantized[row * cols + c];
      signal += x * x;
      row_noise += d * d;
      r.max_abs_error = std::max(r.max_abs_error, std::fabs(d));
    }
    noise += row_noise;
    if (row == 0 || row_noise / cols > r.worst_channel_mse) {
      r.worst_channel_mse = row_noise / static_cast<double>(cols);
      r.worst_channel = row;
    }
  }
  const double n = static_cast<double>(rows * cols);
  r.mse = noise / n;
  r.sqnr_db = noise == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(signal / noise);
  return r;
}

nlohmann::json ErrorReportJson(const ErrorReport& e) {
  return {{"mse", e.mse},
          {"sqnr_db", e.sqnr_db},
          {"max_abs_error", e.max_abs_error},
          {"worst_channel", e.worst_channel},
          {"worst_channel_mse", e.worst_channel_mse}};
}

}  // namespace lowbit
