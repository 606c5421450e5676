// Importance matrices in llama.cpp's imatrix GGUF format: per weight `<name>.in_sum2` (F32, the
// sum over calibration tokens of each input column's squared activation, ne [n_cols, n_mat]) and
// `<name>.counts` (F32, tokens summed, ne [1, n_mat]), with general.type = "imatrix",
// imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size. Names are GGUF tensor names
// ("blk.0.attn_q.weight"). llama-quantize reads the mean sum / count per column; so do we.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace lowbit {

struct ImportanceMatrix {
  // GGUF tensor name -> mean squared activation per input column (count 0 -> 1, as llama.cpp).
  std::map<std::string, std::vector<float>, std::less<>> columns;
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0, chunk_size = 0;
};

// Errors name the file and the tensor or key. The legacy .dat format is refused with a hint.
ImportanceMatrix ReadImatrix(const std::filesystem::path& path);

// Sums and counts for one weight, as accumulated over calibration tokens: one matrix, or (a MoE layer's
// ffn_*_exps) one per expert, each with its own row count.
struct ImatrixEntry {
  std::vector<float> sum_squares;  // per input column, matrix after matrix
  std::vector<float> counts;       // tokens summed, per matrix
};
void WriteImatrix(const std::filesystem::path& path, const std::map<std::string, ImatrixEntry, std::less<>>& entries,
                  const std::vector<std::string>& datasets, uint32_t chunk_count, uint32_t chunk_size);

}  // namespace lowbit
