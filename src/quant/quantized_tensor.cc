#include "quant/quantized_tensor.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "formats/codec.h"

namespace lowbit {

QuantizedTensor::QuantizedTensor(QuantScheme scheme, uint64_t rows, uint64_t cols)
    : scheme_(std::move(scheme)), rows_(rows), cols_(cols), grid_(scheme_.Grid(rows, cols)),
      row_bytes_(PackedBytes(cols, scheme_.element->bits)) {
  scheme_.ValidateShape(rows, cols, "tensor");
  codes_.resize(CheckedMul(rows, row_bytes_, "codes"));
  scales_.resize(grid_.cells() * ScaleBits(scheme_.scale_type) / 8);
  if (scheme_.zero_type == ZeroType::kInt) {
    zeros_.resize(grid_.grid_rows * PackedBytes(grid_.grid_cols, scheme_.element->bits));
  } else {
    zeros_.resize(grid_.cells() * scheme_.zero_bits() / 8);
  }
  if (scheme_.element->bits <= 8) {
    decode_table_.resize(256);
    BuildDecodeTable(*scheme_.element, !scheme_.asymmetric(), std::span<float, 256>(decode_table_.data(), 256));
    decode_affine_ = IsAffineTable(decode_table_, scheme_.element->bits);
  }
}

float QuantizedTensor::Scale(uint64_t cell) const {
  return DecodeScale(scheme_.scale_type, &scales_[cell * ScaleBits(scheme_.scale_type) / 8]);
}

void QuantizedTensor::SetScale(uint64_t cell, float value) {
  EncodeScale(scheme_.scale_type, value, &scales_[cell * ScaleBits(scheme_.scale_type) / 8]);
}

namespace {
ScaleType ZeroStorage(ZeroType z) {
  return z == ZeroType::kF32 ? ScaleType::kF32 : z == ZeroType::kF16 ? ScaleType::kF16 : ScaleType::kBF16;
}
}  // namespace

float QuantizedTensor::Zero(uint64_t cell) const {
  switch (scheme_.zero_type) {
    case ZeroType::kNone:
      return 0.0f;
    case ZeroType::kInt: {
      const int bits = scheme_.element->bits;
      const uint64_t gr = cell / grid_.grid_cols, gc = cell % grid_.grid_cols;
      return static_cast<float>(ReadCode(&zeros_[gr * PackedBytes(grid_.grid_cols, bits)], gc, bits));
    }
    default:
      return DecodeScale(ZeroStorage(scheme_.zero_type), &zeros_[cell * scheme_.zero_bits() / 8]);
  }
}

void QuantizedTensor::SetZero(uint64_t cell, float value) {
  switch (scheme_.zero_type) {
    case ZeroType::kNone:
      return;
    case ZeroType::kInt: {
      const int bits = scheme_.element->bits;
      const uint64_t gr = cell / grid_.grid_cols, gc = cell % grid_.grid_cols;
      WriteCode(&zeros_[gr * PackedBytes(grid_.grid_cols, bits)], gc, bits, static_cast<uint32_t>(value));
      return;
    }
    default:
      EncodeScale(ZeroStorage(scheme_.zero_type), value, &zeros_[cell * scheme_.zero_bits() / 8]);
  }
}

double QuantizedTensor::bits_per_weight() const {
  return 8.0 * static_cast<double>(storage_bytes() - codes_.size()) / static_cast<double>(numel()) +
         scheme_.element->bits;
}

namespace {
// Value of every 8-bit scale code (E8M0, UE4M3), decoded once: row scales are a table lookup.
const std::array<float, 256>& ScaleTable(ScaleType t) {
  static const auto build = [](ScaleType type) {
    std::array<float, 256> table{};
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      table[c] = DecodeScale(type, &code);
    }
    return table;
  };
  static const std::array<float, 256> e8m0 = build(ScaleType::kE8M0), ue4m3 = build(ScaleType::kUE4M3);
  return t == ScaleType::kE8M0 ? e8m0 : ue4m3;
}

// n consecutive stored values of type t, decoded in bulk: this runs once per row in every kernel,
// for the scales and for float zero-points (a call per value cost more than the row's dot at g32).
void DecodeStoredRow(ScaleType t, const uint8_t* stored, uint64_t n, float* out) {
  switch (t) {
    case ScaleType::kF32: std::memcpy(out, stored, n * 4); return;
    case ScaleType::kF16: return Fp16ToFp32Row(reinterpret_cast<const uint16_t*>(stored), n, out);
    case ScaleType::kBF16: return Bf16ToFp32Row(reinterpret_cast<const uint16_t*>(stored), n, out);
    default: {  // 8-bit codes through their table: the SIMD decoder's gather, times one scale of 1
      const float one = 1.0f;
      DecodeRow(stored, 8, ScaleTable(t).data(), false, GroupedRow{n, n, &one, nullptr}, out);
    }
  }
}
}  // namespace

void QuantizedTensor::RowScales(uint64_t r, float* scales, float* biases) const {
  const uint64_t n = grid_.grid_cols, grid_row = r / grid_.cell_rows, first = grid_row * n;
  DecodeStoredRow(scheme_.scale_type, &scales_[first * ScaleBits(scheme_.scale_type) / 8], n, scales);
  if (tensor_scale_ != 1.0f)
    for (uint64_t g = 0; g < n; ++g) scales[g] *= tensor_scale_;
  if (!biases || !scheme_.asymmetric()) return;
  if (scheme_.zero_type == ZeroType::kInt) {
    const int bits = scheme_.element->bits;
    const uint8_t* packed = &zeros_[grid_row * PackedBytes(n, bits)];
    uint8_t zeros[256];  // on the stack, 256 at a time (a byte boundary): no allocation per row
    for (uint64_t g0 = 0; g0 < n; g0 += 256) {
      const uint64_t m = std::min<uint64_t>(256, n - g0);
      UnpackCodes(packed + g0 * bits / 8, m, bits, zeros);
      for (uint64_t k = 0; k < m; ++k) biases[g0 + k] = -static_cast<float>(zeros[k]) * scales[g0 + k];
    }
  } else {
    DecodeStoredRow(ZeroStorage(scheme_.zero_type), &zeros_[first * scheme_.zero_bits() / 8], n, biases);
    for (uint64_t g = 0; g < n; ++g) biases[g] = -biases[g] * scales[g];
  }
}

void QuantizedTensor::DequantizeRow(uint64_t r, float* out) const { DequantizeRange(r, 0, cols_, out); }

void QuantizedTensor::DequantizeRange(uint64_t r, uint64_t begin, uint64_t n, float* out) const {
  const ElementFormat& e = *scheme_.element;
  LOWBIT_CHECK(begin + n <= cols_ && begin * e.bits % 8 == 0);
  const uint8_t* codes = &codes_[r * row_bytes_ + begin * e.bits / 8];
  if (e.bits == 32) {
    std::memcpy(out, codes, n * 4);
    return;
  }
  if (e.bits == 16) {
    std::vector<uint16_t> halves(n);
    std::memcpy(halves.data(), codes, n * 2);
    if (e.minifloat == &kFp16) Fp16ToFp32Row(halves.data(), n, out);
    else Bf16ToFp32Row(halves.data(), n, out);
    return;
  }
  const uint64_t first_group = grid_.grid_cols == 1 ? 0 : begin / grid_.cell_cols;
  LOWBIT_CHECK(grid_.grid_cols == 1 || begin % grid_.cell_cols == 0);
  std::vector<float> scales(grid_.grid_cols), biases(scheme_.asymmetric() ? grid_.grid_cols : 0);
  RowScales(r, scales.data(), biases.empty() ? nullptr : biases.data());
  const GroupedRow grouped{n, grid_.grid_cols == 1 ? cols_ : grid_.cell_cols, scales.data() + first_group,
                           biases.empty() ? nullptr : biases.data() + first_group};
  DecodeRow(codes, e.bits, decode_table_.data(), decode_affine_, grouped, out);
}

std::vector<float> QuantizedTensor::Dequantize() const {
  std::vector<float> out(numel());
  for (uint64_t r = 0; r < rows_; ++r) DequantizeRow(r, &out[r * cols_]);
  return out;
}

}  // namespace lowbit
