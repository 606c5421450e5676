// How far a quantized tensor is from the original: the numbers every quantizer reports.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

namespace lowbit {

struct ErrorReport {
  double mse = 0;
  double sqnr_db = 0;        // 10 log10(signal power / noise power); +inf when exact
  double max_abs_error = 0;
  uint64_t worst_channel = 0;   // output row with the largest MSE
  double worst_channel_mse = 0;
};

// `original` and `dequantized` are row-major [rows x cols].
ErrorReport MeasureError(std::span<const float> original, std::span<const float> dequantized, uint64_t rows,
                         uint64_t cols);

// mse, sqnr_db, max_abs_error, worst_channel, worst_channel_mse: what `quantize-tensor --json` and
// QuantizedTensor.error_report() give.
nlohmann::json ErrorReportJson(const ErrorReport& e);

}  // namespace lowbit
