#include "quant/quantized_tensor.h"

#include <cstring>

#include "core/checked_math.h"
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

void QuantizedTensor::DequantizeRow(uint64_t r, float* out) const {
  const uint8_t* row = &codes_[r * row_bytes_];
  const ElementFormat& e = *scheme_.element;
  if (e.bits == 32) {
    std::memcpy(out, row, cols_ * 4);
    return;
  }
  if (e.bits == 16) {
    std::vector<uint16_t> halves(cols_);
    std::memcpy(halves.data(), row, cols_ * 2);
    if (e.minifloat == &kFp16) Fp16ToFp32Row(halves.data(), cols_, out);
    else Bf16ToFp32Row(halves.data(), cols_, out);
    return;
  }
  const uint64_t gr = r / grid_.cell_rows;
  std::vector<float> scales(grid_.grid_cols), biases;
  for (uint64_t gc = 0; gc < grid_.grid_cols; ++gc)
    scales[gc] = Scale(gr * grid_.grid_cols + gc) * tensor_scale_;
  if (scheme_.asymmetric()) {
    biases.resize(grid_.grid_cols);
    for (uint64_t gc = 0; gc < grid_.grid_cols; ++gc) biases[gc] = -Zero(gr * grid_.grid_cols + gc) * scales[gc];
  }
  const GroupedRow grouped{cols_, grid_.cell_cols, scales.data(), biases.empty() ? nullptr : biases.data()};
  DecodeRow(row, e.bits, decode_table_.data(), grouped, out);
}

std::vector<float> QuantizedTensor::Dequantize() const {
  std::vector<float> out(numel());
  for (uint64_t r = 0; r < rows_; ++r) DequantizeRow(r, &out[r * cols_]);
  return out;
}

}  // namespace lowbit
