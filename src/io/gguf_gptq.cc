#include "io/gguf_gptq.h"

#include <algorithm>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_kquant_grid.h"
#include "io/gguf_pack.h"
#include "io/gguf_quantize.h"
#include "io/gguf_writer.h"

namespace lowbit {
namespace {

constexpr uint64_t kSuperBlock = 256;

// ggml's K-quant super-blocks as a GPTQ grid: per row, the scales of each super-block and every
// element's code.
class KQuantGrid final : public GptqGrid {
 public:
  KQuantGrid(uint32_t type, uint64_t rows, uint64_t cols, std::span<const float> importance)
      : type_(type), cols_(cols), blocks_(cols / kSuperBlock), importance_(importance),
        scales_(rows * blocks_), codes_(rows * cols) {}

  uint64_t group_cols() const override { return kSuperBlock; }
  void ChooseGroup(uint64_t r, uint64_t c, std::span<const float> values) override {
    scales_[r * blocks_ + c / kSuperBlock] = ChooseKQuantScales(type_, values.data(), importance_.subspan(c, kSuperBlock));
  }
  float Round(uint64_t r, uint64_t c, float x) override {
    const KQuantScales& s = scales_[r * blocks_ + c / kSuperBlock];
    const int i = static_cast<int>(c % kSuperBlock);
    const int q = KQuantCode(s, i, x);
    codes_[r * cols_ + c] = q;
    return s.value(i / s.sub(), q);
  }
  void Pack(uint64_t r, std::byte* dst) const {
    const uint32_t block_bytes = FindGgmlType(type_)->block_bytes;
    for (uint64_t b = 0; b < blocks_; ++b)
      PackKQuantBlock(scales_[r * blocks_ + b], &codes_[r * cols_ + b * kSuperBlock], dst + b * block_bytes);
  }

 private:
  uint32_t type_;
  uint64_t cols_, blocks_;
  std::span<const float> importance_;
  std::vector<KQuantScales> scales_;
  std::vector<int> codes_;
};

}  // namespace

GgufGptqResult QuantizeGgufGptq(uint32_t type, std::span<const float> w, uint64_t rows, uint64_t cols,
                                const std::vector<double>& h, uint64_t tokens, const GptqOptions& options,
                                std::string_view name, ThreadPool* pool) {
  LOWBIT_CHECK(w.size() == rows * cols && h.size() == cols * cols);
  // The importance matrix row; dead inputs get a small floor, so no sub-block has all-zero weights.
  // No tokens (an expert the calibration never reached): no importance either.
  std::vector<float> importance(tokens > 0 ? cols : 0);
  double mean = 0;
  for (uint64_t i = 0; i < importance.size(); ++i) mean += h[i * cols + i] / static_cast<double>(tokens * cols);
  for (uint64_t i = 0; i < importance.size(); ++i)
    importance[i] = static_cast<float>(std::max(h[i * cols + i] / static_cast<double>(tokens), 1e-6 * mean));
  const uint64_t row_bytes = GgufWriter::TensorBytes(type, std::vector<uint64_t>{cols});
  GgufGptqResult out{std::vector<std::byte>(rows * row_bytes), std::vector<float>(rows * cols), false};
  auto decode = [&] {
    for (uint64_t r = 0; r < rows; ++r)
      DequantizeGgufRow(type, out.bytes.data() + r * row_bytes, cols, out.grid_values.data() + r * cols);
  };
  if (tokens == 0) {  // encoded as llama-quantize would, without an importance matrix
    ParallelFor(pool, rows, [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r)
        QuantizeGgufRow(type, w.data() + r * cols, static_cast<int64_t>(cols), {}, out.bytes.data() + r * row_bytes);
    });
  } else if (HasKQuantGrid(type)) {
    if (options.act_order) Fail("tensor '{}': GPTQ act-order does not fit ggml's super-blocks", name);
    KQuantGrid grid(type, rows, cols, importance);
    RunGptq(w, rows, cols, h, options, grid, name, pool);
    for (uint64_t r = 0; r < rows; ++r) grid.Pack(r, out.bytes.data() + r * row_bytes);
    out.gptq = true;
  } else if (const std::optional<std::string> scheme = GgufGridScheme(type)) {
    GptqOptions o = options;
    o.act_order = false;  // ggml blocks have no g_idx
    const QuantizedTensor q = QuantizeGptq(w, rows, cols, ParseScheme(*scheme), h, o, name, pool);
    for (uint64_t r = 0; r < rows; ++r) PackGgufRow(q, r, out.bytes.data() + r * row_bytes);
    out.gptq = true;
  } else {
    ParallelFor(pool, rows, [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r)
        QuantizeGgufRow(type, w.data() + r * cols, static_cast<int64_t>(cols), importance, out.bytes.data() + r * row_bytes);
    });
  }
  decode();
  return out;
}

}  // namespace lowbit
