// ggml block layouts (formats.md 2.8), the one place that knows them. Every block type lowbit
// reads unpacks into the same canonical form: one code per element and, per scale block of
// `sub` elements, a scale and a bias, with
//   x = scale * table[code] + bias
// where `table` decodes the codes of `scheme` (our QuantScheme for the type: offset-binary
// integers, E2M1, IQ4_NL levels). The reader dequantizes from this form and the loader repacks
// it into a QuantizedTensor (gguf_repack.h), so both agree by construction.
//
// Scales and biases are computed in fp32 in ggml's own order (K-quants: d * sc and dmin * m,
// each exact in fp32), so dequantized values are bit-identical to ggml's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace lowbit {

// A K-quant super-block's scales as stored: x = d * scales[s] * table[code] - dmin * mins[s].
struct TwoLevelScales {
  float d = 0, dmin = 0;
  int8_t scales[16] = {};
  uint8_t mins[16] = {};
};

struct GgmlBlockFormat {
  uint32_t type;
  // The QuantScheme it repacks into (ParseGgufStorageScheme), e.g. "int4:g32:scale=f16"; K-quants
  // keep their super-blocks ("int6:g16:scale=i8:super256"), Q4_1 / Q5_1 their fp16 bias.
  std::string_view scheme;
  uint32_t sub;  // elements per scale block: 32, or 16 (Q2_K, Q3_K, Q6_K)
  // codes[block_elems], scales[block_elems / sub], biases[block_elems / sub].
  void (*unpack)(const std::byte* block, uint8_t* codes, float* scales, float* biases);
  // Two-level types (super-block schemes): the block's scales as stored.
  void (*two_level)(const std::byte* block, TwoLevelScales& out) = nullptr;
};

// nullptr for plain element types (F32, F16, ...) and block types lowbit cannot read yet.
const GgmlBlockFormat* FindGgmlBlockFormat(uint32_t ggml_type);

// Decodes `blocks` consecutive blocks of `format` into out[blocks * block_elems].
void DecodeGgmlBlocks(const GgmlBlockFormat& format, const std::byte* src, uint64_t blocks, float* out);

}  // namespace lowbit
