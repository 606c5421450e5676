#include "io/gguf_pack.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "formats/codec.h"
#include "io/gguf.h"
#include "io/gguf_blocks.h"

namespace lowbit {
namespace {

constexpr uint32_t kPackable[] = {kGgmlQ4_0, kGgmlQ5_0, kGgmlQ8_0, kGgmlIQ4_NL, kGgmlMXFP4};

// Element j (0..15) in the low nibble of qs[j], j + 16 in the high nibble; Q5_0's fifth bits in qh.
void PutNibbles(const uint8_t* codes, std::byte* qs, std::byte* qh) {
  uint32_t high = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<std::byte>((codes[j] & 0xF) | (codes[j + 16] & 0xF) << 4);
    high |= static_cast<uint32_t>(codes[j] >> 4 & 1) << j | static_cast<uint32_t>(codes[j + 16] >> 4 & 1) << (j + 16);
  }
  if (qh) std::memcpy(qh, &high, 4);
}

}  // namespace

std::optional<std::string> GgufGridScheme(uint32_t ggml_type) {
  for (uint32_t t : kPackable)
    if (t == ggml_type) return ParseScheme(FindGgmlBlockFormat(t)->scheme).ToString();
  return std::nullopt;
}

std::optional<uint32_t> ExactGgufType(const QuantizedTensor& q) {
  if (q.scheme().tensor_scale || q.cols() % 32 != 0) return std::nullopt;
  const std::string scheme = q.scheme().ToString();
  for (uint32_t t : kPackable)
    if (GgufGridScheme(t) == scheme) return t;
  return std::nullopt;
}

void PackGgufRow(const QuantizedTensor& q, uint64_t r, std::byte* dst) {
  const std::optional<uint32_t> type = ExactGgufType(q);
  LOWBIT_CHECK(type.has_value());
  const GgmlTypeInfo& info = *FindGgmlType(*type);
  std::vector<uint8_t> codes(q.cols());
  UnpackCodes(q.codes().data() + r * q.row_bytes(), q.cols(), q.scheme().element->bits, codes.data());
  const size_t scale_bytes = static_cast<size_t>(ScaleBits(q.scheme().scale_type) / 8);
  const uint64_t blocks = q.cols() / 32;
  for (uint64_t b = 0; b < blocks; ++b) {
    std::byte* block = dst + b * info.block_bytes;
    const uint8_t* c = codes.data() + b * 32;
    // The stored scale's own bytes: fp16 d, or MXFP4's E8M0 exponent.
    std::memcpy(block, q.scale_bytes().data() + (r * blocks + b) * scale_bytes, scale_bytes);
    switch (*type) {
      case kGgmlQ4_0: case kGgmlIQ4_NL: PutNibbles(c, block + 2, nullptr); break;
      case kGgmlQ5_0: PutNibbles(c, block + 6, block + 2); break;
      case kGgmlMXFP4: PutNibbles(c, block + 1, nullptr); break;
      case kGgmlQ8_0:
        for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<std::byte>(c[j] ^ 0x80);  // offset-binary -> int8
        break;
      default: LOWBIT_CHECK(false);
    }
  }
}

}  // namespace lowbit
