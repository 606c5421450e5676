// Scalar references for codec.h, and the bit packer (shared by both paths).
#include <cmath>
#include <cstring>

#include "formats/codec.h"

namespace lowbit {

size_t PackedBytes(size_t n, int bits) { return (n * static_cast<size_t>(bits) + 7) / 8; }

void PackCodes(const uint8_t* codes, size_t n, int bits, uint8_t* packed) {
  std::memset(packed, 0, PackedBytes(n, bits));
  const uint32_t mask = (1u << bits) - 1;
  for (size_t i = 0; i < n; ++i) {
    const size_t bit = i * static_cast<size_t>(bits);
    const uint32_t v = (codes[i] & mask) << (bit & 7);
    packed[bit >> 3] |= static_cast<uint8_t>(v);
    if ((bit & 7) + bits > 8) packed[(bit >> 3) + 1] |= static_cast<uint8_t>(v >> 8);
  }
}

void UnpackCodes(const uint8_t* packed, size_t n, int bits, uint8_t* codes) {
  const uint32_t mask = (1u << bits) - 1;
  size_t i = 0;
  // Kernels unpack a row's zero-points this way: the common widths get loops the compiler vectorizes.
  if (bits == 8) {
    std::memcpy(codes, packed, n);
    return;
  }
  if (bits == 4) {
    for (; i + 2 <= n; i += 2) {
      codes[i] = packed[i / 2] & 0xF;
      codes[i + 1] = packed[i / 2] >> 4;
    }
  }
  for (; i < n; ++i) {
    const size_t bit = i * static_cast<size_t>(bits);
    uint32_t v = packed[bit >> 3];
    if ((bit & 7) + bits > 8) v |= static_cast<uint32_t>(packed[(bit >> 3) + 1]) << 8;
    codes[i] = static_cast<uint8_t>((v >> (bit & 7)) & mask);
  }
}

bool IsAffineTable(std::span<const float> table, int bits) {
  for (uint32_t c = 0; c < (1u << bits); ++c)
    if (table[c] != table[0] + static_cast<float>(c)) return false;
  return true;
}

uint32_t ReadCode(const uint8_t* packed, size_t i, int bits) {
  const size_t bit = i * static_cast<size_t>(bits);
  uint32_t v = packed[bit >> 3];
  if ((bit & 7) + bits > 8) v |= static_cast<uint32_t>(packed[(bit >> 3) + 1]) << 8;
  return (v >> (bit & 7)) & ((1u << bits) - 1);
}

void WriteCode(uint8_t* packed, size_t i, int bits, uint32_t code) {
  const size_t bit = i * static_cast<size_t>(bits);
  const uint32_t mask = ((1u << bits) - 1) << (bit & 7);
  const uint32_t v = (code << (bit & 7)) & mask;
  packed[bit >> 3] = static_cast<uint8_t>((packed[bit >> 3] & ~mask) | v);
  if ((bit & 7) + bits > 8) {
    const size_t hi = (bit >> 3) + 1;
    packed[hi] = static_cast<uint8_t>((packed[hi] & ~(mask >> 8)) | (v >> 8));
  }
}

void OrWordCode(uint32_t* words, size_t stride, size_t i, int bits, uint32_t code) {
  const size_t bit = i * static_cast<size_t>(bits), word = bit / 32;
  const int offset = static_cast<int>(bit % 32);
  words[word * stride] |= code << offset;
  if (offset + bits > 32) words[(word + 1) * stride] |= code >> (32 - offset);
}

uint32_t ReadWordCode(const uint32_t* words, size_t stride, size_t i, int bits) {
  const size_t bit = i * static_cast<size_t>(bits), word = bit / 32;
  const int offset = static_cast<int>(bit % 32);
  uint64_t v = words[word * stride] >> offset;
  if (offset + bits > 32) v |= static_cast<uint64_t>(words[(word + 1) * stride]) << (32 - offset);
  return static_cast<uint32_t>(v & ((1u << bits) - 1));
}

void DecodeRowRef(const uint8_t* packed, int bits, const float* table, const GroupedRow& row, float* out) {
  for (size_t i = 0; i < row.n; ++i) {
    const size_t g = i / row.group;
    const float bias = row.bias ? row.bias[g] : 0.0f;
    out[i] = std::fma(table[ReadCode(packed, i, bits)], row.scale[g], bias);
  }
}

void EncodeIntRowRef(const float* x, const GroupedRow& row, const IntEncodeParams& p, uint8_t* codes) {
  for (size_t i = 0; i < row.n; ++i) {
    const size_t g = i / row.group;
    const float pre = p.pre ? p.pre[g] : 0.0f;
    const float post = p.post ? p.post[g] : 0.0f;
    float q = std::nearbyint(x[i] / row.scale[g] + pre) + post;
    q = q < 0 ? 0 : (q > static_cast<float>(p.qmax) ? static_cast<float>(p.qmax) : q);
    codes[i] = static_cast<uint8_t>(q);
  }
}

void EncodeMiniFloatRowRef(const MiniFloat& f, const float* x, const GroupedRow& row, uint8_t* codes) {
  for (size_t i = 0; i < row.n; ++i) {
    codes[i] = static_cast<uint8_t>(EncodeMiniFloat(f, x[i] / row.scale[i / row.group], Overflow::kSaturate));
  }
}

}  // namespace lowbit
