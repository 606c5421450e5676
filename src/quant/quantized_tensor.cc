#include "quant/quantized_tensor.h"

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

void QuantizedTensor::RowScales(uint64_t r, float* scales, float* biases) const {
  const uint64_t n = grid_.grid_cols, first = r / grid_.cell_rows * n;
  const uint8_t* stored = &scales_[first * ScaleBits(scheme_.scale_type) / 8];
  switch (scheme_.scale_type) {  // bulk paths for the wide types; 8-bit types decode per cell
    case ScaleType::kF32: std::memcpy(scales, stored, n * 4); break;
    case ScaleType::kF16: Fp16ToFp32Row(reinterpret_cast<const uint16_t*>(stored), n, scales); break;
    case ScaleType::kBF16: Bf16ToFp32Row(reinterpret_cast<const uint16_t*>(stored), n, scales); break;
    default:
      for (uint64_t g = 0; g < n; ++g) scales[g] = Scale(first + g);
  }
  if (tensor_scale_ != 1.0f)
    for (uint64_t g = 0; g < n; ++g) scales[g] *= tensor_scale_;
  if (biases && scheme_.asymmetric())
    for (uint64_t g = 0; g < n; ++g) biases[g] = -Zero(first + g) * scales[g];
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
  DecodeRow(codes, e.bits, decode_table_.data(), grouped, out);
}

std::vector<float> QuantizedTensor::Dequantize() const {
  std::vector<float> out(numel());
  for (uint64_t r = 0; r < rows_; ++r) DequantizeRow(r, &out[r * cols_]);
  return out;
}

}  // namespace lowbit
