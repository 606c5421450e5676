#include "io/gguf_repack.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "formats/codec.h"
#include "formats/minifloat.h"

namespace lowbit {
namespace {

constexpr size_t kBlock = 32;

// Where a block type keeps its parts (formats.md 2.8): the scale at byte 0 (fp16 d, or MXFP4's
// E8M0 exponent), an optional fp16 min, an optional u32 of fifth bits, then the quants.
struct BlockLayout {
  uint32_t type;
  const char* scheme;
  int min_at;   // -1: no min
  int high_at;  // -1: no fifth bits
  int quants_at;
  bool int8_quants;  // 32 int8 quants; otherwise 16 bytes of nibbles, element j low, j + 16 high
};

constexpr BlockLayout kLayouts[] = {
    {kGgmlQ4_0, "int4:g32:scale=f16", -1, -1, 2, false},
    {kGgmlQ4_1, "int4:g32:asym:scale=f16:zero=f32", 2, -1, 4, false},
    {kGgmlQ5_0, "int5:g32:scale=f16", -1, 2, 6, false},
    {kGgmlQ5_1, "int5:g32:asym:scale=f16:zero=f32", 2, 4, 8, false},
    {kGgmlQ8_0, "int8:g32:scale=f16", -1, -1, 2, true},
    {kGgmlQ8_1, "int8:g32:scale=f16", -1, -1, 4, true},
    {kGgmlMXFP4, "fp4_e2m1:g32:scale=e8m0", -1, -1, 1, false},
    {kGgmlIQ4_NL, "iq4_nl:g32:scale=f16", -1, -1, 2, false},
};

const BlockLayout* FindLayout(uint32_t type) {
  for (const BlockLayout& l : kLayouts)
    if (l.type == type) return &l;
  return nullptr;
}

uint8_t Byte(const std::byte* p, size_t i) { return std::to_integer<uint8_t>(p[i]); }

float Half(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

// The 32 codes of one block, in element order.
void BlockCodes(const BlockLayout& l, const std::byte* block, uint8_t* codes) {
  const std::byte* q = block + l.quants_at;
  if (l.int8_quants) {
    for (size_t j = 0; j < kBlock; ++j) codes[j] = Byte(q, j) ^ 0x80;  // int8 -> offset binary
    return;
  }
  uint32_t high = 0;
  if (l.high_at >= 0) std::memcpy(&high, block + l.high_at, 4);
  for (size_t j = 0; j < kBlock / 2; ++j) {
    codes[j] = static_cast<uint8_t>((Byte(q, j) & 0xF) | ((high >> j) & 1) << 4);
    codes[j + 16] = static_cast<uint8_t>((Byte(q, j) >> 4) | ((high >> (j + 16)) & 1) << 4);
  }
}

}  // namespace

bool GgufTypeRepacks(uint32_t ggml_type) { return FindLayout(ggml_type) != nullptr; }

std::optional<QuantizedTensor> RepackGgufMatrix(const GgufTensorInfo& t, uint64_t rows, uint64_t cols) {
  const BlockLayout* layout = FindLayout(t.ggml_type);
  if (!layout) return std::nullopt;
  const GgmlTypeInfo& info = *FindGgmlType(t.ggml_type);
  const uint64_t blocks_per_row = cols / kBlock;
  if (cols % kBlock != 0 || t.n_elements != rows * cols || t.data.size() != rows * blocks_per_row * info.block_bytes)
    Fail("tensor '{}': {} bytes do not hold a [{} x {}] {} matrix", t.name, t.data.size(), rows, cols, info.name);

  QuantizedTensor q(ParseScheme(layout->scheme), rows, cols);
  const int bits = q.scheme().element->bits;
  const bool mx = q.scheme().mx_scales();
  std::vector<uint8_t> codes(cols);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t b = 0; b < blocks_per_row; ++b) {
      const std::byte* block = t.data.data() + (r * blocks_per_row + b) * info.block_bytes;
      const uint64_t cell = r * blocks_per_row + b;
      BlockCodes(*layout, block, codes.data() + b * kBlock);
      if (mx) {
        if (Byte(block, 0) == 0xFF)
          Fail("tensor '{}': MXFP4 block {} of row {} has the reserved scale exponent 0xFF", t.name, b, r);
        q.scale_bytes()[cell] = Byte(block, 0);
        continue;
      }
      std::memcpy(&q.scale_bytes()[cell * 2], block, 2);  // the fp16 d, bit for bit
      if (layout->min_at < 0) continue;
      const float d = Half(block), m = Half(block + layout->min_at);
      if (d == 0 && m != 0) return std::nullopt;  // every value is m: no finite zero-point says that
      q.SetZero(cell, d == 0 ? 0.0f : -m / d);
    }
    PackCodes(codes.data(), cols, bits, q.codes().data() + r * q.row_bytes());
  }
  return q;
}

}  // namespace lowbit
