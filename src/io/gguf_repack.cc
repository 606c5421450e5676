#include "io/gguf_repack.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "formats/codec.h"
#include "io/gguf_blocks.h"

namespace lowbit {

std::optional<QuantizedTensor> RepackGgufMatrix(const GgufTensorInfo& t, uint64_t rows, uint64_t cols,
                                                ConsumedBytes consumed) {
  const GgmlBlockFormat* format = FindGgmlBlockFormat(t.ggml_type);
  if (!format) return std::nullopt;
  const GgmlTypeInfo& info = *FindGgmlType(t.ggml_type);
  const uint64_t blocks_per_row = cols / info.block_elems, subs = info.block_elems / format->sub;
  if (cols % info.block_elems != 0 || t.n_elements != rows * cols ||
      t.data.size() != rows * blocks_per_row * info.block_bytes)
    Fail("tensor '{}': {} bytes do not hold a [{} x {}] {} matrix", t.name, t.data.size(), rows, cols, info.name);

  QuantizedTensor q(ParseGgufStorageScheme(format->scheme), rows, cols);
  const bool asymmetric = q.scheme().asymmetric();
  std::vector<uint8_t> codes(cols);
  std::vector<float> scales(subs), biases(subs);
  TwoLevelScales two;
  const uint64_t row_bytes = blocks_per_row * info.block_bytes, rows_per_release = std::max<uint64_t>(1, (8 << 20) / row_bytes);
  uint64_t released = 0;  // rows handed to `consumed`
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t b = 0; b < blocks_per_row; ++b) {
      const std::byte* block = t.data.data() + (r * blocks_per_row + b) * info.block_bytes;
      try {
        format->unpack(block, codes.data() + b * info.block_elems, scales.data(), biases.data());
      } catch (const Error& e) {
        Fail("tensor '{}', row {}, block {}: {}", t.name, r, b, e.what());
      }
      const uint64_t first = (r * blocks_per_row + b) * subs;
      if (format->two_level) {  // the stored bytes' values: exact in their types
        format->two_level(block, two);
        q.SetSuper(r, b, two.d, two.dmin);
        for (uint64_t s = 0; s < subs; ++s) {
          q.SetScale(first + s, two.scales[s]);
          if (asymmetric) q.SetZero(first + s, two.mins[s]);
        }
        continue;
      }
      for (uint64_t s = 0; s < subs; ++s) {
        q.SetScale(first + s, scales[s]);  // exact: the value came from this scale type
        if (asymmetric) q.SetZero(first + s, biases[s]);  // Q4_1 / Q5_1: the fp16 min, a stored bias
      }
    }
    PackCodes(codes.data(), cols, q.scheme().element->bits, q.codes().data() + r * q.row_bytes());
    if (consumed && (r + 1 - released == rows_per_release || r + 1 == rows)) {
      consumed(t.data.subspan(released * row_bytes, (r + 1 - released) * row_bytes));
      released = r + 1;
    }
  }
  return q;
}

}  // namespace lowbit
