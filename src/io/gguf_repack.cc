#include "io/gguf_repack.h"

#include <vector>

#include "core/error.h"
#include "formats/codec.h"
#include "io/gguf_blocks.h"

namespace lowbit {

std::optional<QuantizedTensor> RepackGgufMatrix(const GgufTensorInfo& t, uint64_t rows, uint64_t cols) {
  const GgmlBlockFormat* format = FindGgmlBlockFormat(t.ggml_type);
  if (!format) return std::nullopt;
  const GgmlTypeInfo& info = *FindGgmlType(t.ggml_type);
  const uint64_t blocks_per_row = cols / info.block_elems, subs = info.block_elems / format->sub;
  if (cols % info.block_elems != 0 || t.n_elements != rows * cols ||
      t.data.size() != rows * blocks_per_row * info.block_bytes)
    Fail("tensor '{}': {} bytes do not hold a [{} x {}] {} matrix", t.name, t.data.size(), rows, cols, info.name);

  QuantizedTensor q(ParseScheme(format->scheme), rows, cols);
  const bool asymmetric = q.scheme().asymmetric();
  std::vector<uint8_t> codes(cols);
  std::vector<float> scales(subs), biases(subs);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t b = 0; b < blocks_per_row; ++b) {
      uint8_t* block_codes = codes.data() + b * info.block_elems;
      try {
        format->unpack(t.data.data() + (r * blocks_per_row + b) * info.block_bytes, block_codes, scales.data(),
                       biases.data());
      } catch (const Error& e) {
        Fail("tensor '{}', row {}, block {}: {}", t.name, r, b, e.what());
      }
      for (uint64_t s = 0; s < subs; ++s) {
        const uint64_t cell = (r * blocks_per_row + b) * subs + s;
        float scale = scales[s];
        if (asymmetric) {
          // scale * code + bias = (code - zero) * scale. A zero scale makes every value the bias,
          // which no zero-point can say, so such a block becomes codes 0, scale 1, zero -bias.
          if (scale == 0) {
            std::fill_n(block_codes + s * format->sub, format->sub, uint8_t{0});
            scale = 1;
          }
          q.SetZero(cell, -biases[s] / scale);
        }
        q.SetScale(cell, scale);  // exact: the value came from this scale type (or fp32)
      }
    }
    PackCodes(codes.data(), cols, q.scheme().element->bits, q.codes().data() + r * q.row_bytes());
  }
  return q;
}

}  // namespace lowbit
